//! What this build is: llb's version, the ABI generation, the pinned llama.cpp it was built from,
//! and the backends and devices ggml has here (`llb_version`, `llb_devices`).

use crate::backend;
use serde_json::{json, Value};

/// The ABI generation: bumped only by an incompatible change (docs/STYLE.md §10: change the ABI
/// by adding).
pub const ABI_VERSION: u32 = 1;

/// The pinned llama.cpp, from native/llama-cpp.pin (exported by build.rs).
pub mod pin {
    /// The PyPI sdist the tree comes from.
    pub const PACKAGE: &str = env!("LLB_PIN_PACKAGE");
    /// That sdist's version.
    pub const VERSION: &str = env!("LLB_PIN_VERSION");
    /// The llama.cpp commit inside it.
    pub const COMMIT: &str = env!("LLB_PIN_COMMIT");
    /// The llama.cpp release (`bNNNN`) whose chat stack it carries.
    pub const CHAT_STACK: &str = env!("LLB_PIN_CHAT_STACK");
}

/// The llama.cpp tree this crate was built from (templates and vocabularies for fixtures).
pub const LLAMA_CPP_DIR: &str = env!("LLB_LLAMA_CPP_SRC");

/// `llb_version`: the library's version, the ABI generation, the pin, backends and devices.
pub fn version() -> Value {
    let backends = backend::backends();
    let (cpu, platform) = crate::cpu_variant::report();
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
        "backends": backends,
        // The platform folder (`linux-x86_64`) and the CPU kernels in use: `variant` is the
        // module ggml chose at run time (`haswell`, `sse42`, ...) in a LLB_CPU_VARIANTS=1 build,
        // `built-in` otherwise (docs/release.md).
        "platform": platform,
        "cpu": cpu,
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
