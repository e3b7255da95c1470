//! The C ABI. This module only converts and guards (docs/STYLE.md §11): every export runs inside
//! [`guard`], which catches panics (§3), and every pointer cast of the ABI happens here.
//!
//! Ownership, in the words the header repeats: every returned `char *` is owned by the caller
//! and released with `llb_string_free` exactly once; it is never NULL (§2).
#![allow(non_camel_case_types)] // the C names are the ABI

use crate::error::{Error, ErrorCode};
use serde_json::Value;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Runs `body`, turning a panic into `fallback()`: a panic must never unwind into the host.
fn guard<T>(fallback: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            let _ = payload; // the message is reported by the fallback, not printed to the host's stderr
            fallback()
        }
    }
}

fn panic_message() -> String {
    "internal error: llb panicked (this is a bug; please report it)".to_string()
}

/// Moves a JSON value to a heap C string for the caller.
fn into_c(v: &Value) -> *mut c_char {
    // serde_json escapes U+0000, so the text holds no NUL byte.
    CString::new(v.to_string()).expect("JSON text holds no NUL").into_raw()
}

fn error_c(e: &Error) -> *mut c_char {
    into_c(&e.to_json())
}

fn json_result(r: crate::error::Result<Value>) -> *mut c_char {
    match r {
        Ok(v) => into_c(&v),
        Err(e) => error_c(&e),
    }
}

fn internal_c() -> *mut c_char {
    error_c(&Error::new(ErrorCode::Internal, panic_message()))
}

/// Borrows a C string argument as UTF-8: NULL and invalid UTF-8 are `invalid_argument`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> crate::error::Result<&'a str> {
    if p.is_null() {
        return Err(Error::new(ErrorCode::InvalidArgument, format!("{name} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract above.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::new(ErrorCode::InvalidArgument, format!("{name} is not valid UTF-8")))
}

/// Returns the library version and the pinned llama.cpp it was built with:
/// `{"type":"version","llb":"x.y.z","abi":1,"llama_cpp":{"commit":...,"chat_stack":...,"source":...},
/// "backends":["CPU",...],"devices":[...],"platform":"linux-x86_64","cpu":{...}}` (`backends`:
/// the ggml backends in this process; `devices`: as `llb_devices`; `platform`: the
/// `<os>-<arch>` folder the library belongs in; `cpu`: `{"runtime_variants":bool,
/// "variant":"haswell"|"built-in"|...,"module":path|null}`, the CPU kernels in use: in a
/// `LLB_CPU_VARIANTS=1` build the module ggml chose for this CPU at start-up, with
/// `"module_errors"`: backend modules beside libllb that gave no backend, and why).
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly once.
/// Never returns NULL.
///
/// Threads: may be called from any thread, concurrently with anything.
#[no_mangle]
pub extern "C" fn llb_version() -> *mut c_char {
    guard(internal_c, || into_c(&crate::version::version()))
}

/// Lists the devices of the compiled-in ggml backends (the CPU; GPUs with `LLB_CUDA=1`,
/// `LLB_VULKAN=1` or Metal; RPC servers): `{"type":"devices","devices":[{"name":"CPU",
/// "description":...,"type":"cpu"|"gpu"|"igpu"|"accel","memory_free":bytes,"memory_total":bytes}]}`.
/// The names are what the create config's `devices` takes; layers are offloaded to `gpu` and
/// `igpu` devices only.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly once.
/// Never returns NULL.
///
/// Threads: may be called from any thread, concurrently with anything.
#[no_mangle]
pub extern "C" fn llb_devices() -> *mut c_char {
    guard(internal_c, || into_c(&crate::version::devices()))
}

/// Reports what the chat template of the GGUF at `gguf_path` can do, reading the file's header
/// only (no weights are loaded): `{"type":"model_info","supports_tools":bool,"caps":{...},
/// "caps_source":"tool_use"|"default"|"chatml_fallback",...,"memory":{"weights_bytes":N,
/// "kv_bytes_per_1k_tokens":N|null,"kv_type":"f16"}}`. `caps` is llama.cpp's caps map,
/// taken from the `tool_use` template variant when the file has one. `memory` is an estimate
/// for sizing `n_ctx` and pools before loading (KV per 1024 tokens with the default f16 cache;
/// q8_0 needs about 53% of it, q4_0 28%).
///
/// `gguf_path`: a NUL-terminated UTF-8 path; not retained after return. NULL or invalid UTF-8
/// gives an `invalid_argument` error.
///
/// The chat template is code from whoever made the file: llb parses and probes it in a
/// short-lived `fork()`ed child process (no `exec`; it ends with `_exit`), bounded to 10 s and
/// 1 GiB of address space, so a template that recurses without end, loops or exhausts memory
/// is a `template_error` and never crashes or freezes the host (docs/reliability.md).
///
/// Errors (as `{"type":"error","code":...,"message":...}`): `invalid_argument`,
/// `file_not_found`, `io_error`, `not_a_gguf` (bad magic, truncated or corrupt),
/// `template_error` (the template does not parse, cannot render a one-message conversation, or
/// crashed, hung or exhausted memory in the probe), `internal`.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly once.
/// Never returns NULL.
///
/// Threads: may be called from any thread, concurrently with anything.
///
/// # Safety
/// `gguf_path` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn llb_model_info(gguf_path: *const c_char) -> *mut c_char {
    guard(internal_c, || {
        // SAFETY: forwarded caller contract.
        let path = match unsafe { arg_str(gguf_path, "gguf_path") } {
            Ok(p) => PathBuf::from(p),
            Err(e) => return error_c(&e),
        };
        json_result(crate::model_info::model_info(&path))
    })
}

/// Releases a string returned by any llb function. NULL is accepted and ignored.
///
/// Ownership: `s` must come from llb and be released once; never pass it to libc `free`, and
/// never pass llb's strings to another allocator's free.
///
/// Threads: may be called from any thread.
///
/// # Safety
/// `s` is NULL or a string returned by llb that has not been released yet.
#[no_mangle]
pub unsafe extern "C" fn llb_string_free(s: *mut c_char) {
    guard(
        || (),
        || {
            if !s.is_null() {
                // SAFETY: s came from CString::into_raw in this module and is released once.
                drop(unsafe { CString::from_raw(s) });
            }
        },
    )
}

/// An engine: one request at a time over its own context (KV cache), on weights shared with the
/// other handles on the same file. Opaque to hosts. (`llb_pool` serves many requests at once.)
// The C name is the ABI's and stays. In the crate it holds an `engine::Engine`; the Rust type
// `engine::Chat` is something else: the core that both an engine and a pool are built on.
pub struct llb_chat {
    engine: crate::engine::Engine,
}

/// Receives an event as JSON. Called on the thread that runs the operation; `event_json` is
/// valid only during the call (copy it to keep it). Return 0 to continue, non-zero to cancel the
/// running operation.
pub type llb_event_fn = Option<unsafe extern "C" fn(event_json: *const c_char, user_data: *mut c_void) -> i32>;

/// The host's callback and its opaque pointer.
struct HostCallback {
    f: unsafe extern "C" fn(*const c_char, *mut c_void) -> i32,
    user_data: *mut c_void,
}

// SAFETY: llb calls the callback only on the thread running the operation the host started;
// what user_data points to is the host's to make safe for that use (documented in the header).
unsafe impl Send for HostCallback {}
// SAFETY: as for Send: the pointers are only passed back to the host's function, on the thread
// of the host's own call; llb reads nothing through them.
unsafe impl Sync for HostCallback {}

impl HostCallback {
    fn call(&self, v: &Value) -> bool {
        let Ok(c) = CString::new(v.to_string()) else { return true };
        // SAFETY: a valid NUL-terminated string, alive for the call; the host's function pointer.
        unsafe { (self.f)(c.as_ptr(), self.user_data) == 0 }
    }
}

/// The create config of an engine or a pool: text, then JSON.
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string.
unsafe fn engine_config(config_json: *const c_char) -> crate::error::Result<crate::request::EngineConfig> {
    // SAFETY: forwarded caller contract.
    let text = unsafe { arg_str(config_json, "config_json") }?;
    crate::request::parse::<crate::request::EngineConfig>(text, "config")
}

/// Opens an engine for the model in `config_json`:
/// `{"model_path":"...","n_ctx":4096,"n_threads":null,"n_batch":512,"seed":null,"chat_template_kwargs":{}}`.
/// `"deterministic_call_syntax": false` turns off greedy call wrappers (on by default: inside a
/// tool call, markers, the function name, argument keys and punctuation are sampled greedily and
/// argument values with the request's sampler); a request's own field of that name overrides it.
/// `"jump_forward": false` turns off jump-forward decoding (on by default: text a strict grammar
/// forces is evaluated in one batch instead of sampled token by token); a request's own field of
/// that name overrides it.
/// `"speculative": {"type": "ngram-mod", "draft_max": 16, "draft_min": 0, "ngram_size": 4}` (each
/// optional; `type` one of llama.cpp's n-gram drafters or `"none"`): tokens the reply copies from
/// the conversation are drafted and verified in one decode, losslessly; with
/// `"draft_model_path": "draft.gguf"` (type `draft-simple`; `"draft_n_gpu_layers": N`, default the
/// model's) a smaller model of the same vocabulary drafts (another vocabulary is `invalid_argument`);
/// a request's `"speculative": false | true` overrides it; `timings.draft_n` / `draft_accepted_n`
/// count them.
/// `"reasoning_budget": N` is the default reasoning budget in tokens (-1 unlimited, 0 thinking
/// off where the template allows; as llama-server's `--reasoning-budget`): past it the template's
/// end-of-thinking tag is forced and the reply goes on. A request's own field overrides it;
/// without either, `tool_choice` required/named gets half the reply's room (docs/tool-calls.md).
/// `"prompt_cache": {"ram_bytes": N, "dir": "...", "disk_bytes": N}` (each optional): a
/// conversation that leaves the context is kept as its KV state in RAM (default budget sized
/// from the model; 0: none) and, with `dir`, in files that outlive the process (default budget
/// 16 GiB); a prompt that begins with a kept one restores it instead of reading it
/// (docs/design.md, "The prompt cache"). Freeing the engine writes what it holds to `dir`.
///
/// Devices and memory (all optional; docs/scaling.md): `n_gpu_layers` (default: every layer
/// when a GPU device exists, else 0; -1 = all), `main_gpu`, `split_mode` (`none`|`layer`|`row`),
/// `tensor_split` (proportions per GPU), `devices` (names from `llb_devices`; `["none"]`: the
/// CPU alone, as llama.cpp's `--device none`), `flash_attn`
/// (`auto`|`on`|`off`), `offload_kqv` (default true), `type_k`/`type_v` (`f16`|`q8_0`|`q4_0`;
/// a quantized V cache turns flash attention on, and `off` is refused), `use_mmap` (default
/// true), `use_mlock`. A device that is not here is `device_unavailable`, a bad value
/// `invalid_argument`, both at create. Engines share weights when they load a file with the
/// same `n_gpu_layers`/`main_gpu`/`split_mode`/`tensor_split`/`devices`/`use_mmap`/`use_mlock`.
///
/// Only tool-capable models load: when the model's chat template cannot describe tools and
/// render tool calls (llama.cpp's caps probe, `tool_use` variant preferred), this emits
/// `{"type":"create_failure","code":"tools_unsupported","message":"Model <file> rejected: ...","caps":{...}}`
/// to `on_event` and returns NULL, before the weights are loaded or a KV cache is allocated.
/// There is no override. The template is probed as in `llb_model_info` (in a bounded child
/// process). Other failures emit `create_failure` with their code
/// (`invalid_json`, `invalid_argument` naming the field, `device_unavailable`, `file_not_found`,
/// `not_a_gguf`, `model_load_failed`, `template_error`, `context_create_failed`) and return NULL.
///
/// `on_event` may be NULL, but then the reason for a NULL return is lost: hosts should pass one
/// (or call `llb_model_info` first). The same callback later receives the engine's streaming
/// chunks and progress events (see `llb_chat_infer`); `user_data` is passed back untouched and
/// must stay valid until `llb_chat_destroy`.
///
/// `config_json`: not retained after return.
///
/// Ownership: the returned handle is owned by the caller; release it with `llb_chat_destroy`
/// exactly once. Engines opened on the same model file share one copy of the weights.
///
/// Threads: may be called from any thread, concurrently with anything.
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string valid for the call; `on_event`, when not
/// NULL, is callable with `user_data` until the engine is destroyed.
#[no_mangle]
pub unsafe extern "C" fn llb_chat_create(
    config_json: *const c_char,
    on_event: llb_event_fn,
    user_data: *mut c_void,
) -> *mut llb_chat {
    let cb = on_event.map(|f| std::sync::Arc::new(HostCallback { f, user_data }));
    let fail = |e: &Error| {
        if let Some(cb) = &cb {
            cb.call(&e.to_json_typed("create_failure"));
        }
        std::ptr::null_mut()
    };
    guard(
        || fail(&Error::new(ErrorCode::Internal, panic_message())),
        || {
            // SAFETY: forwarded caller contract.
            let config = match unsafe { engine_config(config_json) } {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let sink: Option<crate::engine::EventSink> =
                cb.clone().map(|cb| Box::new(move |v: &Value| cb.call(v)) as crate::engine::EventSink);
            match crate::engine::Engine::create(config, sink) {
                Ok(engine) => Box::into_raw(Box::new(llb_chat { engine })),
                Err(e) => fail(&e),
            }
        },
    )
}

/// Runs one OpenAI chat completion on the engine and returns the `chat.completion` JSON:
/// `{"id","object":"chat.completion","created","model","choices":[{"index":0,"message":{"role":
/// "assistant","content":...,"tool_calls":[...],"reasoning_content":...},"finish_reason":...}],
/// "usage":{...,"prompt_tokens_details":{"cached_tokens":N}},"timings":{...}}`. `cached_tokens`
/// counts the prompt tokens the context held or the prompt cache restored
/// (`timings.cache_restored_n`, `timings.cache_restore_ms`); a prompt-cache file found bad is
/// reported in `warnings` and as a `{"type":"warning","code":"prompt_cache_ignored",...}` event.
///
/// With `"stream": true`, each delta also goes to the engine's `on_event` as
/// `{"type":"chunk","data":<chat.completion.chunk>}` while generating, and the final completion
/// is still returned. `on_event` also receives `{"type":"progress",...}` events (every 50 ms
/// while the request waits for a place in a pool, `"stage":"queued"`; after each prompt batch;
/// every 16 generated tokens); returning non-zero from any event cancels:
/// the call returns the partial completion with `finish_reason:"cancelled"` and the engine
/// stays usable.
///
/// llb's request fields beyond OpenAI's: `reasoning_budget` (tokens, -1 unlimited, 0 no
/// thinking; `reasoning_effort` maps none/minimal 0, low 1024, medium 4096, high unlimited),
/// `deterministic_call_syntax`, `jump_forward`, `speculative`. A call cut by `max_tokens` comes back with its
/// arguments closed into valid JSON and a `tool_call_incomplete` warning (docs/tool-calls.md).
///
/// Errors: `invalid_argument` (NULL, unknown or wrong-typed field, named in the message),
/// `invalid_json`, `template_error`, `context_overflow`, `busy`, `internal`.
///
/// `request_json`: not retained after return.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly
/// once. Never returns NULL.
///
/// Threads: one request at a time per engine. A call on an engine that is running a request on
/// another thread returns a `busy` error at once. Different engines run concurrently.
///
/// # Safety
/// `chat` is NULL or a live handle from `llb_chat_create`; `request_json` is NULL or a
/// NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn llb_chat_infer(chat: *mut llb_chat, request_json: *const c_char) -> *mut c_char {
    guard(internal_c, || {
        if chat.is_null() {
            return error_c(&Error::new(ErrorCode::InvalidArgument, "chat is NULL"));
        }
        // SAFETY: forwarded caller contract.
        let text = match unsafe { arg_str(request_json, "request_json") } {
            Ok(t) => t,
            Err(e) => return error_c(&e),
        };
        // SAFETY: chat is a live handle (caller contract); infer takes &self and serializes
        // concurrent calls itself.
        let engine = unsafe { &(*chat).engine };
        json_result(engine.infer(text))
    })
}

/// Destroys an engine: frees its context, and the model's weights when no other engine uses
/// them. NULL is accepted and ignored.
///
/// Destroying an engine while a call on it is running on another thread, or destroying it
/// twice, is a host error (undefined behaviour), as with any freed handle.
///
/// Threads: may be called from any thread once no call on this engine is running.
///
/// # Safety
/// `chat` is NULL or a live handle from `llb_chat_create`, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn llb_chat_destroy(chat: *mut llb_chat) {
    guard(
        || (),
        || {
            if !chat.is_null() {
                // SAFETY: chat came from Box::into_raw in llb_chat_create and is freed once.
                drop(unsafe { Box::from_raw(chat) });
                crate::model::release_free_memory();
            }
        },
    )
}

/// A pool: one model's batched context serving many requests at once. Opaque to hosts.
pub struct llb_pool {
    pool: crate::engine::Pool,
}

/// Opens a pool for the model in `config_json`: the `llb_chat_create` config plus
/// `"n_parallel"` (requests decoding at once, default 4) and `"max_queue"` (requests that may
/// wait for a turn, default 16 × n_parallel). `n_ctx` is the KV budget all requests share
/// (default 4096 × n_parallel); one request holds at most the model's training context.
///
/// Requests on a pool are sequences of one llama context: every running request's next step
/// goes into one batched decode, prompts are evaluated in chunks between the others' steps, and
/// a prompt prefix any sequence holds (a shared system prompt and tool list, or a conversation's
/// previous turn) is copied instead of evaluated. Idle conversations stay in the KV cache until
/// space is needed (least recently used first).
///
/// Same gate and failures as `llb_chat_create`: emits `{"type":"create_failure",...}` to
/// `on_event` (may be NULL) and returns NULL. `on_event`/`user_data` are used during this call
/// only; each `llb_pool_infer` brings its own.
///
/// Ownership: release the handle with `llb_pool_destroy` exactly once.
///
/// Threads: may be called from any thread, concurrently with anything.
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string valid for the call; `on_event`, when not
/// NULL, is callable with `user_data` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn llb_pool_create(
    config_json: *const c_char,
    on_event: llb_event_fn,
    user_data: *mut c_void,
) -> *mut llb_pool {
    let cb = on_event.map(|f| HostCallback { f, user_data });
    let fail = |e: &Error| {
        if let Some(cb) = &cb {
            cb.call(&e.to_json_typed("create_failure"));
        }
        std::ptr::null_mut()
    };
    guard(
        || fail(&Error::new(ErrorCode::Internal, panic_message())),
        || {
            // SAFETY: forwarded caller contract.
            let config = match unsafe { engine_config(config_json) } {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            match crate::engine::Pool::create(config) {
                Ok(pool) => Box::into_raw(Box::new(llb_pool { pool })),
                Err(e) => fail(&e),
            }
        },
    )
}

/// Runs one OpenAI chat completion on the pool, concurrently with the pool's other requests,
/// and returns the `chat.completion` JSON (as `llb_chat_infer`). Blocks the calling thread until
/// this request is complete.
///
/// `on_event` (may be NULL) receives this request's events — streamed chunks, progress — on
/// the calling thread, never on another one; returning non-zero cancels this request only.
/// `user_data` is passed back untouched and not retained after return.
///
/// Errors: as `llb_chat_infer`, with `queue_full` instead of `busy`: the pool holds
/// `n_parallel + max_queue` requests already (running, waiting, or making their prompt);
/// nothing was started, the prompt was not even rendered, and the answer comes at once (retry
/// later). The check and the taking of a place are one atomic step, so a burst of any size
/// from any number of threads never puts more than `n_parallel + max_queue` requests in.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly
/// once. Never returns NULL.
///
/// Threads: any number of threads may call this at once on the same pool.
///
/// # Safety
/// `pool` is NULL or a live handle from `llb_pool_create`; `request_json` is NULL or a
/// NUL-terminated string valid for the call; `on_event`, when not NULL, is callable with
/// `user_data` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn llb_pool_infer(
    pool: *mut llb_pool,
    request_json: *const c_char,
    on_event: llb_event_fn,
    user_data: *mut c_void,
) -> *mut c_char {
    let cb = on_event.map(|f| HostCallback { f, user_data });
    guard(internal_c, || {
        if pool.is_null() {
            return error_c(&Error::new(ErrorCode::InvalidArgument, "pool is NULL"));
        }
        // SAFETY: forwarded caller contract.
        let text = match unsafe { arg_str(request_json, "request_json") } {
            Ok(t) => t,
            Err(e) => return error_c(&e),
        };
        // SAFETY: pool is a live handle (caller contract); infer takes &self.
        let pool = unsafe { &(*pool).pool };
        json_result(pool.infer(text, &|ev: &Value| cb.as_ref().is_none_or(|cb| cb.call(ev))))
    })
}

/// The pool's state: `{"type":"pool_stats","n_slots","n_parallel","n_ctx","running","queued",
/// "preparing","max_queue","request_bytes","tokens_held":[per sequence],"lost":null}`;
/// `running + queued` never exceeds `n_parallel + max_queue`; `queued` counts the waiting
/// requests, `preparing` of them still making their prompt; `request_bytes` is what the
/// requests in the pool hold in token lists; `lost` is the message of the error that made the
/// pool unusable (an RPC server lost mid-request), null while it works. `prompt_cache`: the
/// prompt cache's bytes, entries, hits, misses and evictions per tier (docs/design.md, "The
/// prompt cache").
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly
/// once. Never returns NULL.
///
/// Threads: any number of threads may call this at once, concurrently with `llb_pool_infer`
/// on the same pool (a snapshot taken under the pool's lock).
///
/// # Safety
/// `pool` is NULL or a live handle from `llb_pool_create`.
#[no_mangle]
pub unsafe extern "C" fn llb_pool_stats(pool: *mut llb_pool) -> *mut c_char {
    guard(internal_c, || {
        if pool.is_null() {
            return error_c(&Error::new(ErrorCode::InvalidArgument, "pool is NULL"));
        }
        // SAFETY: a live handle (caller contract).
        let mut v = unsafe { &(*pool).pool }.stats();
        v["type"] = Value::from("pool_stats");
        json_result(Ok(v))
    })
}

/// Destroys a pool: frees its context, and the model's weights when nothing else uses them.
/// NULL is accepted and ignored. Destroying a pool while a call on it runs, or twice, is a host
/// error (undefined behaviour), as with any freed handle.
///
/// Threads: may be called from any thread once no call on this pool is running.
///
/// # Safety
/// `pool` is NULL or a live handle from `llb_pool_create`, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn llb_pool_destroy(pool: *mut llb_pool) {
    guard(
        || (),
        || {
            if !pool.is_null() {
                // SAFETY: pool came from Box::into_raw in llb_pool_create and is freed once.
                drop(unsafe { Box::from_raw(pool) });
                crate::model::release_free_memory();
            }
        },
    )
}

/// Pulls a GGUF from the Hugging Face hub into the model cache (Hugging Face layout), verifies
/// its sha256, and checks it with the same tool gate as `llb_chat_create`. `request_json`:
/// `{"repo":"org/name","revision":"main","quant":"Q4_K_M"|null,"filename":null,"cache_dir":null,
/// "token":null,"offline":false,"endpoint":null}`.
///
/// Returns `{"type":"pull_result","repo","revision","commit","files":[...],"path":"<first shard>",
/// "sha256":[...],"from_cache":bool,"bytes_downloaded":N,"model_info":{...}}`, or an error:
/// `invalid_argument`, `invalid_json`, `auth_required`, `license_not_accepted`, `auth_failed`,
/// `repo_not_found`, `revision_not_found`, `file_not_found`, `repo_disabled`, `rate_limited`,
/// `no_gguf`, `quant_not_found`, `checksum_mismatch`, `network`, `disk`, `cancelled`,
/// `invalid_repo_listing`, `not_cached`, `tools_unsupported` (with `caps` and `quarantined`),
/// `not_a_gguf`, `template_error`, `internal`. docs/pull.md has the details.
///
/// Events to `on_event` (may be NULL), on the calling thread, before the call returns:
/// `pull_resolved`, `pull_progress` (`bytes`, `total`; at most every 100 ms) and `pull_warning`
/// (`code`, `message`). Returning non-zero cancels: the call returns `cancelled` and the partial
/// download stays resumable. `user_data` is passed back untouched and not retained after return.
/// The Hugging Face token never appears in events, results or errors.
///
/// `request_json`: not retained after return.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly once.
/// Never returns NULL.
///
/// Threads: may be called from any thread, concurrently with anything; concurrent pulls of the
/// same file wait for each other. Blocks for the whole download.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string valid for the call; `on_event`, when not
/// NULL, is callable with `user_data` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn llb_model_pull(
    request_json: *const c_char,
    on_event: llb_event_fn,
    user_data: *mut c_void,
) -> *mut c_char {
    let cb = on_event.map(|f| HostCallback { f, user_data });
    guard(internal_c, || {
        // SAFETY: forwarded caller contract.
        let text = match unsafe { arg_str(request_json, "request_json") } {
            Ok(t) => t,
            Err(e) => return error_c(&e),
        };
        json_result(crate::pull::pull_json(text, &|ev: &Value| cb.as_ref().is_none_or(|cb| cb.call(ev))))
    })
}
