//! Devices and memory through the C ABI (issue #11): every device/KV field of the create config
//! is validated at create (a clear code naming the field, never a hang), quantized KV caches
//! give valid tool calls with less memory, and models are shared only when loaded alike.
//!
//! Tests here run one at a time (a static mutex): one measures RSS, one counts loaded models.

mod common;

use common::cabi::{CEngine, CPool};
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Qwen2.5 template, 32k SPM vocabulary, 32-dimension heads (quantized KV blocks are 32 wide).
fn small() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    o.size = llb::fixture::Size::Small;
    fixture_with("backends-small-qwen2.5", &o)
}

/// The same with 16-dimension heads.
fn tiny() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    fixture_with("backends-tiny-qwen2.5", &o)
}

fn has_gpu() -> bool {
    llb::backend::devices().iter().any(|d| d.is_gpu())
}

fn config(path: &PathBuf, extra: Value) -> Value {
    let mut c = json!({"model_path": path, "n_ctx": 1024, "n_threads": 1});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// The create_failure an engine and a pool both report for `extra`; asserts code and field.
fn refused(extra: Value, code: &str, mentions: &str) {
    let path = tiny();
    let e = CEngine::open(&config(&path, extra.clone())).err().unwrap_or_else(|| panic!("{extra} opened an engine"));
    let p = CPool::open(&config(&path, extra.clone())).err().unwrap_or_else(|| panic!("{extra} opened a pool"));
    for f in [e, p] {
        assert_eq!(f["type"], "create_failure", "{extra}: {f}");
        assert_eq!(f["code"], code, "{extra}: {f}");
        let msg = f["message"].as_str().unwrap();
        assert!(msg.contains(mentions), "{extra}: the message should name `{mentions}`: {msg}");
    }
}

#[test]
fn every_device_and_kv_field_is_validated_at_create() {
    let _s = serial();
    refused(json!({"n_gpu_layers": -2}), "invalid_argument", "n_gpu_layers");
    refused(json!({"n_gpu_layers": "all"}), "invalid_argument", "n_gpu_layers");
    refused(json!({"main_gpu": -1}), "invalid_argument", "main_gpu");
    refused(json!({"main_gpu": 64}), "device_unavailable", "main_gpu");
    refused(json!({"split_mode": "diagonal"}), "invalid_argument", "split_mode");
    refused(json!({"split_mode": "tensor"}), "invalid_argument", "split_mode");
    refused(json!({"tensor_split": [1.0, -1.0]}), "invalid_argument", "tensor_split");
    refused(json!({"tensor_split": [0.0, 0.0]}), "invalid_argument", "tensor_split");
    refused(json!({"tensor_split": "1,1"}), "invalid_argument", "tensor_split");
    refused(json!({"tensor_split": vec![1.0; 300]}), "device_unavailable", "tensor_split");
    refused(json!({"devices": ["NoSuchGPU7"]}), "device_unavailable", "NoSuchGPU7");
    refused(json!({"devices": ["CPU"]}), "invalid_argument", "devices");
    refused(json!({"devices": []}), "invalid_argument", "devices");
    refused(json!({"devices": "CUDA0"}), "invalid_argument", "devices");
    refused(json!({"devices": ["none", "CUDA0"]}), "invalid_argument", "none");
    // `none` (llama.cpp's `--device none`) is the CPU alone, and cannot take offloaded layers.
    refused(json!({"devices": ["none"], "n_gpu_layers": 1}), "device_unavailable", "n_gpu_layers");
    let e = CEngine::open(&config(&tiny(), json!({"devices": ["none"]}))).unwrap_or_else(|f| panic!("{f}"));
    assert_valid_call(&e.infer(&required()));
    refused(json!({"flash_attn": "maybe"}), "invalid_argument", "flash_attn");
    refused(json!({"flash_attn": true}), "invalid_argument", "flash_attn");
    refused(json!({"offload_kqv": "yes"}), "invalid_argument", "offload_kqv");
    refused(json!({"type_k": "q5_1"}), "invalid_argument", "type_k");
    refused(json!({"type_v": "f32"}), "invalid_argument", "type_v");
    // llama.cpp's quantized V cache needs flash attention.
    refused(json!({"type_v": "q8_0", "flash_attn": "off"}), "invalid_argument", "flash_attn");
    // 32-element blocks do not divide this model's 16-dimension heads.
    refused(json!({"type_k": "q4_0"}), "invalid_argument", "16 dimensions");
    refused(json!({"type_v": "q8_0"}), "invalid_argument", "type_v");
    refused(json!({"use_mmap": 1}), "invalid_argument", "use_mmap");
    refused(json!({"use_mlock": "no"}), "invalid_argument", "use_mlock");
    refused(json!({"rpc_servers": []}), "invalid_argument", "rpc_servers");
    refused(json!({"rpc_servers": ["localhost"]}), "invalid_argument", "rpc_servers");
    refused(json!({"rpc_servers": ["localhost:0"]}), "invalid_argument", "rpc_servers");
    // Port 1 on loopback: nothing listens (or, in a build without RPC, the backend is missing).
    refused(json!({"rpc_servers": ["127.0.0.1:1"]}), "device_unavailable", "rpc_servers");
    if !has_gpu() {
        // Offloading asked for explicitly, on a build or machine without a GPU.
        refused(json!({"n_gpu_layers": 8}), "device_unavailable", "no GPU device");
        refused(json!({"tensor_split": [1.0, 1.0]}), "device_unavailable", "tensor_split");
    }

    // Every field at a valid value opens and serves a tool call.
    let ok = json!({"n_gpu_layers": 0, "split_mode": "none", "flash_attn": "off", "offload_kqv": false,
                    "type_k": "f16", "type_v": "f16", "use_mmap": false, "use_mlock": false});
    let e = CEngine::open(&config(&tiny(), ok.clone())).unwrap_or_else(|f| panic!("{ok}: {f}"));
    assert_valid_call(&e.infer(&required()));
}

fn required() -> Value {
    json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": llb::fixture::sample_tools(),
           "tool_choice": "required", "temperature": 0, "max_tokens": 64})
}

fn assert_valid_call(r: &Value) {
    assert_eq!(r["object"], "chat.completion", "{r}");
    let calls = r["choices"][0]["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool call: {r}"));
    assert!(!calls.is_empty(), "{r}");
    let names: Vec<Value> =
        llb::fixture::sample_tools().as_array().unwrap().iter().map(|t| t["function"]["name"].clone()).collect();
    for c in calls {
        assert!(names.contains(&c["function"]["name"]), "unknown tool: {c}");
        let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {c}"));
        assert!(args.is_object(), "{c}");
    }
}

#[test]
fn quantized_kv_caches_give_valid_tool_calls_in_less_memory() {
    let _s = serial();
    let path = small();
    // Holds the weights (same load params: shared), so the pools below add only their context.
    let holder = CEngine::open(&config(&path, json!({}))).unwrap();
    assert_valid_call(&holder.infer(&required()));
    let mut grown = Vec::new();
    for t in ["f16", "q8_0", "q4_0"] {
        let e = CEngine::open(&config(&path, json!({"type_k": t, "type_v": t}))).unwrap_or_else(|f| panic!("{t}: {f}"));
        assert_valid_call(&e.infer(&required()));
        drop(e);
        // A pool's n_ctx is a budget beyond one sequence's training context: a large KV cache.
        // What a pool of 4096 cells allocates (compute buffers, outputs) is subtracted. Measured
        // as allocation, not residency: a cleared cache's pages become resident only as cells
        // are written (tests/zero_pages.rs).
        let allocated = |cells: u32| {
            let before = malloc_in_use();
            let p = CPool::open(&config(
                &path,
                json!({"type_k": t, "type_v": t, "n_ctx": cells, "n_parallel": 2, "n_batch": 32}),
            ))
            .unwrap_or_else(|f| panic!("{t}: {f}"));
            let after = malloc_in_use();
            assert_valid_call(&p.infer(&required()));
            after.saturating_sub(before)
        };
        let (small, big) = (allocated(4096), allocated(262144));
        grown.push(big.saturating_sub(small));
        eprintln!(
            "KV {t}: a 262144-token pool context allocated {:.1} MiB more than a 4096-token one",
            grown.last().copied().unwrap() as f64 / 1048576.0
        );
    }
    // 2 layers × 2 KV heads × 32 dims × (K + V) × 262144 cells: f16 128 MiB, q8_0 68 MiB, q4_0
    // 36 MiB. The compute buffers also grow with n_ctx, the same for every type: compare the
    // differences between types.
    let mib = |b: u64| b as f64 / 1048576.0;
    let (f16, q8, q4) = (mib(grown[0]), mib(grown[1]), mib(grown[2]));
    assert!(f16 > 128.0, "an f16 cache of 262144 tokens is 128 MiB: grew {f16:.1} MiB");
    assert!((f16 - q8 - 60.0).abs() < 6.0, "q8_0 saves 60 MiB over f16: {f16:.1} vs {q8:.1} MiB");
    assert!((q8 - q4 - 32.0).abs() < 4.0, "q4_0 saves 32 MiB over q8_0: {q8:.1} vs {q4:.1} MiB");
}

#[test]
fn models_are_shared_only_when_loaded_alike() {
    let _s = serial();
    let path = small();
    let before = llb::model::holders(&path);
    let a = CEngine::open(&config(&path, json!({}))).unwrap();
    let loaded = llb::model::loaded_count();
    let b = CEngine::open(&config(&path, json!({"type_k": "q8_0"}))).unwrap();
    assert_eq!(llb::model::holders(&path), before + 2);
    assert_eq!(llb::model::loaded_count(), loaded, "b shares a's weights");
    // KV types are the context's: b shares a's weights. mmap is the model's: c loads its own.
    let c = CEngine::open(&config(&path, json!({"use_mmap": false}))).unwrap();
    assert_eq!(llb::model::loaded_count(), loaded + 1, "another load for other load params");
    let d = CEngine::open(&config(&path, json!({"use_mmap": false, "flash_attn": "on"}))).unwrap();
    assert_eq!(llb::model::loaded_count(), loaded + 1, "shared with c");
    for e in [&a, &b, &c, &d] {
        assert_valid_call(&e.infer(&required()));
    }
}

#[test]
fn version_and_devices_report_the_compiled_backends() {
    let v = common::cabi::take(llb::ffi::llb_version());
    let backends: Vec<&str> = v["backends"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()).collect();
    assert!(backends.contains(&"CPU"), "{v}");
    // RPC is compiled in by default (LLB_RPC=0 leaves it out).
    assert_eq!(backends.contains(&"RPC"), cfg!(llb_rpc), "{v}");
    let d = common::cabi::take(llb::ffi::llb_devices());
    assert_eq!(d["type"], "devices", "{d}");
    assert_eq!(d["devices"], v["devices"], "llb_version carries the same list");
    let cpu = d["devices"].as_array().unwrap().iter().find(|x| x["type"] == "cpu").unwrap_or_else(|| panic!("{d}"));
    assert!(cpu["memory_total"].as_u64().unwrap() > 0, "{cpu}");
    assert!(cpu["memory_free"].as_u64().unwrap() <= cpu["memory_total"].as_u64().unwrap(), "{cpu}");
    assert!(!cpu["description"].as_str().unwrap().is_empty(), "{cpu}");
    // Every listed GPU name is accepted by `devices`; this build's device types are known ones.
    for dev in d["devices"].as_array().unwrap() {
        assert!(["cpu", "gpu", "igpu", "accel"].contains(&dev["type"].as_str().unwrap()), "{dev}");
    }
}

#[test]
fn model_info_estimates_weights_and_kv_memory() {
    let path = small();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid string for the call.
    let info = common::cabi::take(unsafe { llb::ffi::llb_model_info(c.as_ptr()) });
    let m = &info["memory"];
    // 2 layers × 2 KV heads × (32 + 32) dims × 2 bytes × 1024 tokens.
    assert_eq!(m["kv_bytes_per_1k_tokens"], 2 * 2 * 64 * 2 * 1024, "{m}");
    assert_eq!(m["kv_type"], "f16", "{m}");
    let weights = m["weights_bytes"].as_u64().unwrap();
    let file = std::fs::metadata(&path).unwrap().len();
    assert!(weights > file / 2 && weights <= file, "weights {weights} of a {file}-byte file");
    // A vocab-only file has no weights.
    let vocab = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", true);
    let c = std::ffi::CString::new(vocab.to_str().unwrap()).unwrap();
    // SAFETY: as above.
    let info = common::cabi::take(unsafe { llb::ffi::llb_model_info(c.as_ptr()) });
    assert_eq!(info["memory"]["weights_bytes"], 0, "{info}");
}

/// With a Vulkan build (scripts/vulkan-check.sh: LLB_VULKAN=1, lavapipe on a CPU-only machine),
/// every layer offloaded to the Vulkan device gives the CPU's greedy tool call. Skips, saying
/// so, when no Vulkan device exists; `LLB_REQUIRE_VULKAN=1` makes that a failure.
#[test]
fn vulkan_offload_matches_the_cpu() {
    let _s = serial();
    let devices = llb::backend::devices();
    let Some(vk) = devices.iter().find(|d| d.name.starts_with("Vulkan")) else {
        assert!(
            std::env::var("LLB_REQUIRE_VULKAN").is_err(),
            "LLB_REQUIRE_VULKAN is set and there is no Vulkan device"
        );
        eprintln!("skipped: no Vulkan device in this build (scripts/vulkan-check.sh builds one)");
        return;
    };
    let path = small();
    let strip = |r: Value| {
        let mut m = r["choices"][0]["message"].clone();
        assert_valid_call(&r);
        m["tool_calls"].as_array_mut().unwrap().iter_mut().for_each(|c| c["id"] = Value::Null);
        m
    };
    // The CPU alone: with `n_gpu_layers: 0` llama.cpp would still hand big batches to the GPU.
    let cpu = strip(CEngine::open(&config(&path, json!({"devices": ["none"]}))).unwrap().infer(&required()));
    let gpu = CEngine::open(&config(&path, json!({"n_gpu_layers": -1, "devices": [vk.name]})))
        .unwrap_or_else(|f| panic!("{}: {f}", vk.name));
    assert_eq!(strip(gpu.infer(&required())), cpu, "{} ({}) differs from the CPU", vk.name, vk.description);
}
