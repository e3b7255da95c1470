//! llb's diagnostics switch: `LLB_DEBUG=1` prints each request's grammar, prompt tail and raw
//! output, the grammar engine's fallbacks and adaptive thread moves, to stderr. Below every module that prints.

use std::sync::OnceLock;

/// Whether `LLB_DEBUG` is set (to anything but "" or "0"); read once.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("LLB_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}
