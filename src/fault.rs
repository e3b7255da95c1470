//! Test-only fault injection: the switches issue #6 asks for, proving that a panic inside an
//! export and a C++ exception inside the shim both come back as `internal` error JSON and leave
//! the process (and the engine) usable.
//!
//! Switches are per thread and one-shot: arming one affects only the next matching call made on
//! the arming thread, so tests running in parallel threads cannot trip each other, and nothing a
//! host does through the C ABI can arm them (they are Rust-only, not exported).

use std::cell::Cell;

thread_local! {
    static PANIC_AT: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Where an armed panic fires: `"model_info"` (inside llb_model_info), `"create"` (inside
/// llb_chat_create, with the model already loaded), `"infer"` (inside llb_chat_infer, after the
/// prompt is in the KV cache, with the engine locked).
#[doc(hidden)]
pub fn arm_panic(site: &'static str) {
    PANIC_AT.with(|p| p.set(Some(site)));
}

/// Makes the next shim call on this thread throw a C++ exception (std::runtime_error) inside the
/// shim's exception guard, as a failure deep in llama.cpp's chat stack would.
#[doc(hidden)]
pub fn arm_shim_throw() {
    crate::shim::testing_throw_next();
}

/// Disarms both switches on this thread.
#[doc(hidden)]
pub fn disarm() {
    PANIC_AT.with(|p| p.set(None));
    crate::shim::testing_clear();
}

/// A fault site: panics when armed for `site` on this thread (and disarms).
#[inline]
pub(crate) fn site(site: &'static str) {
    if PANIC_AT.with(|p| p.get()) == Some(site) {
        PANIC_AT.with(|p| p.set(None));
        panic!("llb fault injection: panic at {site}");
    }
}
