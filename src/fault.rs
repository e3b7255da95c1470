//! Test-only fault injection: the switches issue #6 asks for, proving that a panic inside an
//! export and a C++ exception inside the shim both come back as `internal` error JSON and leave
//! the process (and the engine) usable; and a scripted reply ([`arm_reply`]), so a test can put
//! exactly the output it needs (a complete call and a cut second one, issue 35) through the
//! library's own path from sampling to the response.
//!
//! Switches are per thread and one-shot: arming one affects only the next matching call made on
//! the arming thread, so tests running in parallel threads cannot trip each other, and nothing a
//! host does through the C ABI can arm them (they are Rust-only, not exported).

use std::cell::{Cell, RefCell};

thread_local! {
    static PANIC_AT: Cell<Option<&'static str>> = const { Cell::new(None) };
    static REPLY: RefCell<Option<Reply>> = const { RefCell::new(None) };
}

/// A scripted reply ([`arm_reply`]).
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub text: Vec<u8>,
    /// At the end of `text`: the end-of-turn token (true), or the reply is cut as by
    /// `max_tokens` (false).
    pub end_of_turn: bool,
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

/// Makes the next request on this thread write `text` instead of sampling: at each step the
/// longest token that continues `text` and that the grammar allows (no jump-forward, whose
/// forced text could run past the end; a reasoning budget's forced tag must stay inside `text`,
/// else the request fails). Once `text` is written the reply ends its turn (`end_of_turn`), or it
/// is cut there as `max_tokens` cuts a reply (`finish_reason: "length"`).
#[doc(hidden)]
pub fn arm_reply(text: &str, end_of_turn: bool) {
    REPLY.with(|r| *r.borrow_mut() = Some(Reply { text: text.as_bytes().to_vec(), end_of_turn }));
}

/// The scripted reply armed on this thread, disarmed (None: none).
pub(crate) fn take_reply() -> Option<Reply> {
    REPLY.with(|r| r.borrow_mut().take())
}

/// Disarms every switch on this thread.
#[doc(hidden)]
pub fn disarm() {
    PANIC_AT.with(|p| p.set(None));
    REPLY.with(|r| *r.borrow_mut() = None);
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

/// Process-wide, not per thread (the scheduler's thread moves the states): a sequence's state
/// crosses with its tensor copies grouped on every buffer, host memory included, as it does on a
/// GPU's (native/state.cpp), so a test on the CPU runs the device path. The bytes are the same
/// either way.
#[doc(hidden)]
pub fn group_state_copies_everywhere(on: bool) {
    GROUP_EVERYWHERE.store(on, std::sync::atomic::Ordering::Relaxed);
}

static GROUP_EVERYWHERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The shim's grouping mode for state copies: 1 (on device buffers), 2 (everywhere).
pub(crate) fn state_grouping() -> i32 {
    if GROUP_EVERYWHERE.load(std::sync::atomic::Ordering::Relaxed) {
        2
    } else {
        1
    }
}
