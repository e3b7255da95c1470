//! The panic and exception boundary (issue #6): test-only switches (src/fault.rs) make an export
//! panic inside Rust, or the C++ shim throw, on the calling thread. Both must come back as
//! `internal` error JSON, the process must survive, and the handle must stay usable.

mod common;

use common::cabi::{take, CEngine};
use serde_json::{json, Value};
use std::ffi::CString;

fn model() -> std::path::PathBuf {
    common::corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false)
}

fn model_info(path: &std::path::Path) -> Value {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid C string; take frees the result.
    take(unsafe { llb::ffi::llb_model_info(c.as_ptr()) })
}

fn tool_request() -> Value {
    json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}],
        "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 7})
}

/// A correct answer to tool_request(): the handle works.
fn assert_tool_call(label: &str, r: &Value) {
    assert_eq!(r["object"], "chat.completion", "{label}: {r}");
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{label}: {r}");
    let call = &r["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{label}: {r}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"] == "Paris" || args["city"] == "Rome", "{label}: {r}");
}

fn assert_internal(label: &str, v: &Value, needle: &str) {
    assert_eq!(v["code"], "internal", "{label}: {v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{label}: message {msg:?} lacks {needle:?}");
}

#[test]
fn a_panic_in_model_info_is_internal_and_the_next_call_works() {
    let path = model();
    llb::fault::arm_panic("model_info");
    assert_internal("panic", &model_info(&path), "panicked");
    assert_eq!(model_info(&path)["type"], "model_info");
}

#[test]
fn a_shim_exception_in_model_info_is_internal_and_the_next_call_works() {
    let path = model();
    llb::fault::arm_shim_throw();
    assert_internal("throw", &model_info(&path), "C++ exception thrown inside the shim");
    assert_eq!(model_info(&path)["type"], "model_info");
}

#[test]
fn a_panic_or_exception_in_create_is_an_internal_create_failure() {
    let path = model();
    let config = json!({"model_path": path, "n_ctx": 1024, "n_threads": 1});
    // The panic fires with the model loaded and the templates built: unwinding must release them.
    llb::fault::arm_panic("create");
    let failure = CEngine::open(&config).err().expect("create must fail");
    assert_eq!(failure["type"], "create_failure", "{failure}");
    assert_internal("panic", &failure, "panicked");
    llb::fault::arm_shim_throw();
    let failure = CEngine::open(&config).err().expect("create must fail");
    assert_internal("throw", &failure, "C++ exception thrown inside the shim");
    llb::fault::disarm();
    let e = CEngine::open(&config).expect("create after the faults");
    assert_tool_call("after create faults", &e.infer(&tool_request()));
}

#[test]
fn a_panic_mid_request_is_internal_and_the_engine_stays_usable() {
    let e = CEngine::open_model(&model());
    assert_tool_call("before", &e.infer(&tool_request()));
    for round in 0..3 {
        // Fires inside llb_chat_infer with the engine locked and the prompt in the KV cache.
        llb::fault::arm_panic("infer");
        assert_internal(&format!("panic {round}"), &e.infer(&tool_request()), "panicked");
        let r = e.infer(&tool_request());
        assert_tool_call(&format!("after panic {round}"), &r);
        // The poisoned state was dropped: the next request starts from an empty cache...
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{r}");
        // ...and reuse works again right after.
        let again = e.infer(&tool_request());
        assert_tool_call("reuse", &again);
        assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{again}");
    }
}

#[test]
fn a_shim_exception_mid_request_is_internal_and_the_engine_stays_usable() {
    let e = CEngine::open_model(&model());
    for round in 0..3 {
        // The next shim call on this thread is the template apply of the request.
        llb::fault::arm_shim_throw();
        assert_internal(&format!("throw {round}"), &e.infer(&tool_request()), "C++ exception thrown inside the shim");
        assert_tool_call(&format!("after throw {round}"), &e.infer(&tool_request()));
    }
    // Streaming too.
    llb::fault::arm_shim_throw();
    let mut req = tool_request();
    req["stream"] = json!(true);
    assert_internal("throw streamed", &e.infer(&req), "C++ exception thrown inside the shim");
    assert_tool_call("after streamed throw", &e.infer(&req));
}
