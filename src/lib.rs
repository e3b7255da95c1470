//! llb: a tool-calling bridge over llama.cpp's chat stack.
//!
//! The C ABI lives in [`ffi`] (header: include/llb.h); it is the library's interface. Everything
//! else is plain Rust that the ABI, the `llb` CLI and the tests share: JSON in → typed request →
//! engine → shim → llama.cpp. docs/STYLE.md §13 says which module may call which.
//!
//! Modules are private to the crate (docs/STYLE.md §14). The ones the integration tests,
//! examples, fuzz targets and the `llb` binary reach into are `#[doc(hidden)] pub`: visible to
//! them, not an API. This file declares modules and re-exports and holds no code, so the crate
//! root calls into no module that could call back into it.

pub mod ffi;

#[doc(hidden)]
pub mod backend;
mod call_syntax;
mod cost;
mod cpu_variant;
mod debug;
#[doc(hidden)]
pub mod emulate;
#[doc(hidden)]
pub mod engine;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod fault;
#[doc(hidden)]
pub mod fixture;
mod generate;
#[doc(hidden)]
pub mod gguf;
#[doc(hidden)]
pub mod grammar;
mod jump;
mod logprobs;
#[doc(hidden)]
pub mod model;
#[doc(hidden)]
pub mod model_info;
mod partial_json;
#[doc(hidden)]
pub mod prompt;
mod prompt_cache;
#[doc(hidden)]
pub mod pull;
#[doc(hidden)]
pub mod request;
mod response;
mod sampler;
mod scheduler;
mod session;
mod speculate;
#[doc(hidden)]
pub mod shim;
#[doc(hidden)]
pub mod sys;
mod threads;
#[doc(hidden)]
pub mod tokens;
mod utf8;
mod version;

#[doc(hidden)]
pub use backend::init_backend;
#[doc(hidden)]
pub use version::version;
