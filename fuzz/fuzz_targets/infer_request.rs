//! `llb_chat_infer` with arbitrary request bytes (passed through unchanged up to the first NUL,
//! invalid UTF-8 and deep nesting included) against one tiny tool-capable engine created once
//! per process. The event callback cancels each request after a few events, so requests reach
//! generation and parsing without running long. Every answer must be JSON of the documented
//! shape, and never an `internal` error.
//!
//! The engine is destroyed at exit (after the first request, so that every static of llama.cpp
//! a request touches is built before the handler is registered and torn down after it runs):
//! a process that exits with an engine still at work has C++ statics destroyed under the
//! engine's scheduler thread (include/llb.h, "Process exit").
#![no_main]

use libfuzzer_sys::fuzz_target;
use llb::ffi;
use llb_fuzz::{c_string, check_answer, create, engine_config, reset_events, take};
use std::ffi::CString;
use std::sync::{Once, OnceLock};

struct Engine(*mut ffi::llb_chat);
// SAFETY: libFuzzer runs the target on one thread; the handle is only used there.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

fn engine() -> *mut ffi::llb_chat {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let config = CString::new(engine_config()).unwrap();
        Engine(create(&config).expect("the fixture engine must open"))
    })
    .0
}

extern "C" fn destroy_engine() {
    // SAFETY: the engine made by engine(); no request is running (exit runs on the fuzzing
    // thread, between inputs) and this handler runs once.
    unsafe { ffi::llb_chat_destroy(engine()) };
}

fuzz_target!(|data: &[u8]| {
    let e = engine();
    let request = c_string(data);
    reset_events();
    // SAFETY: a live engine and a NUL-terminated string.
    let answer = unsafe { take(ffi::llb_chat_infer(e, request.as_ptr())) };
    check_answer(&answer);
    static AT_EXIT: Once = Once::new();
    // SAFETY: registers a plain extern "C" function with no arguments.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(destroy_engine);
    });
});
