//! llb: a tool-calling bridge over llama.cpp's chat stack.
//!
//! The C ABI lives in [`ffi`] (header: include/llb.h). Everything else is plain Rust that the
//! ABI, the `llb` CLI and the tests share: JSON in → typed request → engine → shim → llama.cpp.

pub mod backend;
pub mod call_syntax;
pub mod engine;
pub mod error;
pub mod fault;
pub mod ffi;
pub mod fixture;
pub mod generate;
pub mod grammar;
pub mod gguf;
pub mod jump;
pub mod logprobs;
pub mod model;
pub mod model_info;
pub mod partial_json;
pub mod prompt;
pub mod pull;
pub mod request;
pub mod response;
pub mod sampler;
pub mod scheduler;
pub mod session;
pub mod shim;
pub mod sys;
pub mod threads;
pub mod tokens;
pub mod utf8;

use serde_json::{json, Value};
use std::sync::Once;

/// The ABI generation: bumped only by an incompatible change (STYLE §10: change by adding).
pub const ABI_VERSION: u32 = 1;

/// The pinned llama.cpp, from native/llama-cpp.pin (exported by build.rs).
pub mod pin {
    pub const PACKAGE: &str = env!("LLB_PIN_PACKAGE");
    pub const VERSION: &str = env!("LLB_PIN_VERSION");
    pub const SHA256: &str = env!("LLB_PIN_SHA256");
    pub const COMMIT: &str = env!("LLB_PIN_COMMIT");
    pub const CHAT_STACK: &str = env!("LLB_PIN_CHAT_STACK");
}

/// The llama.cpp tree this crate was built from (templates and vocabularies for fixtures).
pub const LLAMA_CPP_DIR: &str = env!("LLB_LLAMA_CPP_SRC");

pub fn version() -> Value {
    json!({
        "type": "version",
        "llb": env!("CARGO_PKG_VERSION"),
        "abi": ABI_VERSION,
        "llama_cpp": {
            "commit": pin::COMMIT,
            "chat_stack": pin::CHAT_STACK,
            "source": format!("{} {} sdist", pin::PACKAGE, pin::VERSION),
        },
        // ggml's compiled-in backends (CPU always; CUDA, Vulkan, Metal, RPC by build switch).
        "backends": backend::backends(),
        "devices": devices_json(),
    })
}

/// `llb_devices`: every ggml device this build and machine have.
pub fn devices() -> Value {
    json!({"type": "devices", "devices": devices_json()})
}

fn devices_json() -> Vec<Value> {
    backend::devices().iter().map(backend::Device::to_json).collect()
}

/// One-time process setup: llama.cpp's backend and logging (silent unless `LLB_LOG=1`).
pub fn init_backend() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let verbose = std::env::var("LLB_LOG").map(|v| !v.is_empty() && v != "0").unwrap_or(false);
        shim::set_logging(verbose);
        // SAFETY: called once per process, before any other llama.cpp use by llb.
        unsafe { sys::llama_backend_init() };
        backend::register_builtin();
    });
}
