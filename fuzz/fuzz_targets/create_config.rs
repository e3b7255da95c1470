//! `llb_chat_create` with arbitrary config bytes. The target runs inside its work folder, where
//! the tiny fixture is `model.gguf`; one engine on it stays open for the whole process, so the
//! model stays loaded and creates are cheap. An engine that opens runs one short request (the
//! config's threads, batch size and template kwargs only act then) and is destroyed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llb::ffi;
use llb_fuzz::{c_string, check_answer, create, engine_config, reset_events, take};
use std::ffi::CString;
use std::sync::OnceLock;

struct Engine(#[allow(dead_code)] *mut ffi::llb_chat);
// SAFETY: never used; it only keeps the model loaded.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

fn keep_model_loaded() {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let config = CString::new(engine_config()).unwrap();
        Engine(create(&config).expect("the fixture engine must open"))
    });
}

const REQUEST: &str = r#"{"messages":[{"role":"user","content":"Weather?"}],"tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}],"max_tokens":2}"#;

fuzz_target!(|data: &[u8]| {
    keep_model_loaded();
    let config = c_string(data);
    reset_events();
    if let Some(e) = create(&config) {
        reset_events();
        let request = CString::new(REQUEST).unwrap();
        // SAFETY: a live engine, a valid string; the engine is destroyed once, afterwards.
        unsafe {
            let answer = take(ffi::llb_chat_infer(e, request.as_ptr()));
            check_answer(&answer);
            ffi::llb_chat_destroy(e);
        }
    }
});
