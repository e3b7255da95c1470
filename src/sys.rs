//! Raw FFI for llama.h (with gguf.h and ggml-backend.h), ggml-rpc.h, native/shim.h and
//! native/rpc_guard.h: bindgen's output for the pinned llama.cpp tree, committed in
//! `sys/bindings.rs` so that building llb needs no libclang. `tests/bindings.rs` regenerates it
//! and fails when it is stale (`LLB_REGEN_BINDINGS=1` rewrites it), or when a native function is
//! declared anywhere else (docs/STYLE.md §4).
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code, clippy::all)]

// include!, not `mod`: rustfmt leaves the generated file as bindgen wrote it.
include!("sys/bindings.rs");
