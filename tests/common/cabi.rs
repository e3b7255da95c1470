//! Drives the C ABI the way a host does: a C callback that records events and can cancel.

use serde_json::Value;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_char;
use std::sync::Mutex;

/// A hook run on every event (e.g. to signal another thread).
pub type Hook = Box<dyn FnMut(&Value) + Send>;

/// What the callback sees, and when it answers "cancel".
#[derive(Default)]
pub struct Events {
    pub seen: Mutex<Vec<Value>>,
    /// Cancel once this many chunk events arrived (0: never).
    pub cancel_after_chunks: Mutex<usize>,
    /// Cancel at the first event from this instant on (a host's timeout).
    pub cancel_at: Mutex<Option<std::time::Instant>>,
    /// Invoked on every event (e.g. to signal another thread).
    pub on_event: Mutex<Option<Hook>>,
}

impl Events {
    pub fn chunks(&self) -> Vec<Value> {
        self.seen.lock().unwrap().iter().filter(|e| e["type"] == "chunk").map(|e| e["data"].clone()).collect()
    }
    pub fn of_type(&self, t: &str) -> Vec<Value> {
        self.seen.lock().unwrap().iter().filter(|e| e["type"] == t).cloned().collect()
    }
    pub fn clear(&self) {
        self.seen.lock().unwrap().clear();
    }
}

unsafe extern "C" fn record(event_json: *const c_char, user_data: *mut c_void) -> i32 {
    // SAFETY: llb passes a NUL-terminated string valid for the call and our Events pointer.
    let (text, ev) = unsafe { (CStr::from_ptr(event_json), &*(user_data as *const Events)) };
    let text = text.to_str().expect("event JSON must be valid UTF-8");
    let v: Value = serde_json::from_str(text).expect("event must be JSON");
    if let Some(f) = ev.on_event.lock().unwrap().as_mut() {
        f(&v);
    }
    let mut seen = ev.seen.lock().unwrap();
    seen.push(v);
    let limit = *ev.cancel_after_chunks.lock().unwrap();
    let n = seen.iter().filter(|e| e["type"] == "chunk").count();
    let late = ev.cancel_at.lock().unwrap().is_some_and(|t| std::time::Instant::now() >= t);
    (limit > 0 && n >= limit || late) as i32
}

pub fn take(p: *mut c_char) -> Value {
    assert!(!p.is_null(), "llb returned NULL");
    // SAFETY: a live llb string, freed once here.
    unsafe {
        let text = CStr::from_ptr(p).to_str().expect("llb output must be valid UTF-8").to_owned();
        llb::ffi::llb_string_free(p);
        serde_json::from_str(&text).expect("llb output must be JSON")
    }
}

/// An engine opened through `llb_chat_create`, with its recorded events.
pub struct CEngine {
    pub raw: *mut llb::ffi::llb_chat,
    pub events: Box<Events>,
}

// SAFETY: the handle may be used from any thread (llb serializes calls per engine).
unsafe impl Send for CEngine {}
// SAFETY: as Send: every llb_chat_* call may come from any thread.
unsafe impl Sync for CEngine {}

impl CEngine {
    /// Ok(engine) or Err(the create_failure event, or Null when none came).
    pub fn open(config: &Value) -> Result<CEngine, Value> {
        Self::open_text(&config.to_string())
    }

    pub fn open_text(config: &str) -> Result<CEngine, Value> {
        let events = Box::new(Events::default());
        let c = CString::new(config).unwrap();
        // SAFETY: c is valid; the callback and its Events outlive the engine (dropped after destroy).
        let raw =
            unsafe { llb::ffi::llb_chat_create(c.as_ptr(), Some(record), &*events as *const Events as *mut c_void) };
        if raw.is_null() {
            let last = events.seen.lock().unwrap().last().cloned().unwrap_or(Value::Null);
            return Err(last);
        }
        Ok(CEngine { raw, events })
    }

    /// One compute thread: cargo runs tests in parallel, and ggml's thread pool spin-waits, so
    /// more compute threads than cores would mostly spin.
    pub fn open_model(path: &std::path::Path) -> CEngine {
        Self::open(&serde_json::json!({"model_path": path, "n_ctx": 4096, "n_threads": 1}))
            .unwrap_or_else(|e| panic!("create failed: {e}"))
    }

    pub fn infer(&self, req: &Value) -> Value {
        self.infer_text(&req.to_string())
    }

    pub fn infer_text(&self, text: &str) -> Value {
        let c = CString::new(text).unwrap();
        // SAFETY: live handle, valid string.
        take(unsafe { llb::ffi::llb_chat_infer(self.raw, c.as_ptr()) })
    }
}

impl Drop for CEngine {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed once.
        unsafe { llb::ffi::llb_chat_destroy(self.raw) }
    }
}

/// A pool opened through `llb_pool_create`; each request brings its own recorded events.
pub struct CPool {
    pub raw: *mut llb::ffi::llb_pool,
}

// SAFETY: a pool may be used from any number of threads at once.
unsafe impl Send for CPool {}
// SAFETY: as Send: every llb_pool_* call may come from any thread at once.
unsafe impl Sync for CPool {}

impl CPool {
    /// Ok(pool) or Err(the create_failure event, or Null when none came).
    pub fn open(config: &Value) -> Result<CPool, Value> {
        let events = Events::default();
        let c = CString::new(config.to_string()).unwrap();
        // SAFETY: c is valid; the callback and its Events outlive the call.
        let raw =
            unsafe { llb::ffi::llb_pool_create(c.as_ptr(), Some(record), &events as *const Events as *mut c_void) };
        if raw.is_null() {
            let last = events.seen.lock().unwrap().last().cloned().unwrap_or(Value::Null);
            return Err(last);
        }
        Ok(CPool { raw })
    }

    /// Runs a request; its events are recorded in `events` (which may cancel it).
    pub fn infer_with(&self, req: &Value, events: &Events) -> Value {
        let c = CString::new(req.to_string()).unwrap();
        // SAFETY: live handle, valid string; events outlives the call.
        take(unsafe {
            llb::ffi::llb_pool_infer(self.raw, c.as_ptr(), Some(record), events as *const Events as *mut c_void)
        })
    }

    pub fn infer(&self, req: &Value) -> Value {
        self.infer_with(req, &Events::default())
    }

    pub fn stats(&self) -> Value {
        // SAFETY: live handle.
        take(unsafe { llb::ffi::llb_pool_stats(self.raw) })
    }
}

impl Drop for CPool {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed once.
        unsafe { llb::ffi::llb_pool_destroy(self.raw) }
    }
}

/// Rebuilds the message a stream of chunks describes (OpenAI's accumulation rules).
pub fn accumulate(chunks: &[Value]) -> Value {
    let mut content: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut calls: Vec<Value> = Vec::new();
    for c in chunks {
        for ch in c["choices"].as_array().into_iter().flatten() {
            let d = &ch["delta"];
            if let Some(s) = d["content"].as_str() {
                content.get_or_insert_with(String::new).push_str(s);
            }
            if let Some(s) = d["reasoning_content"].as_str() {
                reasoning.get_or_insert_with(String::new).push_str(s);
            }
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().expect("tool call delta without index") as usize;
                if i == calls.len() {
                    assert!(
                        tc["id"].is_string() && tc["function"]["name"].is_string(),
                        "first delta of a call needs id and name: {tc}"
                    );
                    assert_eq!(tc["function"]["arguments"], "", "first delta carries empty arguments");
                    assert_eq!(tc["type"], "function");
                    calls.push(serde_json::json!({"id": tc["id"], "type": "function", "function": {"name": tc["function"]["name"], "arguments": ""}}));
                } else {
                    assert!(i < calls.len(), "delta for unknown call index {i}");
                    assert!(
                        tc.get("id").is_none() && tc["function"].get("name").is_none(),
                        "later deltas carry arguments only: {tc}"
                    );
                    let a = calls[i]["function"]["arguments"].as_str().unwrap().to_string()
                        + tc["function"]["arguments"].as_str().unwrap_or("");
                    calls[i]["function"]["arguments"] = Value::String(a);
                }
            }
        }
    }
    let mut m = serde_json::json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    if let Some(r) = reasoning {
        m["reasoning_content"] = Value::String(r);
    }
    m
}

/// Asserts the chunks rebuild the final message exactly, and the stream's shape.
pub fn assert_stream_matches(label: &str, chunks: &[Value], resp: &Value) {
    assert!(!chunks.is_empty(), "{label}: no chunks");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant", "{label}: first chunk carries the role");
    let last = chunks.iter().rev().find(|c| !c["choices"].as_array().unwrap().is_empty()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], resp["choices"][0]["finish_reason"], "{label}: finish reason");
    for c in chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], resp["id"], "{label}: chunk ids match the completion id");
    }
    let got = accumulate(chunks);
    let want = &resp["choices"][0]["message"];
    let norm = |v: &Value| v.as_str().unwrap_or("").to_string();
    assert_eq!(norm(&got["content"]), norm(&want["content"]), "{label}: content");
    assert_eq!(norm(&got["reasoning_content"]), norm(&want["reasoning_content"]), "{label}: reasoning");
    assert_eq!(got["tool_calls"], want["tool_calls"], "{label}: tool calls");
}
