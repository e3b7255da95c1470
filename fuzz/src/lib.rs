//! Shared by the fuzz targets and `make_seeds`: a per-process work folder (in /dev/shm when it
//! is there), the one tiny tool-capable fixture the engine targets use, C-string helpers and an
//! event callback that cancels after a few events.

use llb::ffi;
use llb::fixture::{self, FixtureOptions};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The fixture's file name inside the work folder. The engine targets run with the work folder
/// as their current directory, so `create_config` seeds say `"model_path":"model.gguf"` and stay
/// valid on every machine.
pub const MODEL_FILE: &str = "model.gguf";

/// The tokenizer and the template of the fixture: the test suite's main tool-capable template
/// over the 32k-token llama-spm vocabulary (as the stress tests' leak cycle). With qwen2's 152k
/// tokens, sampling under the tool grammar (checked against every candidate) held
/// `infer_request` to 56 execs/s.
pub const FIXTURE_VOCAB: &str = "llama-spm";
pub const FIXTURE_TEMPLATE: &str = "Qwen-Qwen2.5-7B-Instruct";

static OWNER: AtomicU32 = AtomicU32::new(0);

extern "C" fn remove_work_dir() {
    // Only the process that made the folder removes it (not a forked child that exits).
    if std::process::id() == OWNER.load(Ordering::SeqCst) {
        if let Some(d) = WORK.get() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

static WORK: OnceLock<PathBuf> = OnceLock::new();

/// This process's folder: `/dev/shm/llb-fuzz/<pid>` (else under the temp dir). Folders of
/// processes that are gone are removed first; this one is removed at exit.
pub fn work_dir() -> &'static Path {
    WORK.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() && tempfile_ok(shm) { shm.to_path_buf() } else { std::env::temp_dir() };
        let base = base.join("llb-fuzz");
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let d = base.join(std::process::id().to_string());
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
        OWNER.store(std::process::id(), Ordering::SeqCst);
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(remove_work_dir) };
        d
    })
}

fn tempfile_ok(dir: &Path) -> bool {
    let p = dir.join(format!(".llb-fuzz-probe-{}", std::process::id()));
    let ok = std::fs::write(&p, b"x").is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// Writes the tiny tool-capable fixture (llama-spm tokenizer, Qwen2.5 template, random weights)
/// into the work folder, once per process, makes the work folder the current directory, and
/// returns the fixture's absolute path.
pub fn fixture_model() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = work_dir();
        let path = dir.join(MODEL_FILE);
        let mut o = FixtureOptions::new(FIXTURE_VOCAB);
        o.template = Some(fixture::read_template(FIXTURE_TEMPLATE).expect("fixture template"));
        fixture::write_fixture(&o, &path).unwrap_or_else(|e| panic!("writing the fixture: {e}"));
        std::env::set_current_dir(dir).expect("entering the work folder");
        path
    })
}

/// The fuzz input as a C string: everything before the first NUL byte (what a C host passing
/// these bytes would pass), invalid UTF-8 included.
pub fn c_string(data: &[u8]) -> CString {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    CString::new(&data[..end]).expect("no NUL before end")
}

/// Takes an llb string: checks it is JSON, releases it, returns it parsed.
///
/// # Safety
/// `s` is a string returned by llb, not released yet.
pub unsafe fn take(s: *mut c_char) -> serde_json::Value {
    assert!(!s.is_null(), "llb returned NULL");
    // SAFETY: llb's strings are NUL-terminated and alive until released.
    let text = unsafe { CStr::from_ptr(s) }.to_str().expect("llb returned invalid UTF-8").to_owned();
    // SAFETY: released once.
    unsafe { ffi::llb_string_free(s) };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("llb returned non-JSON ({e}): {text}"))
}

/// Events seen since the last [`reset_events`]; [`on_event`] cancels past [`EVENT_LIMIT`].
pub static EVENTS: AtomicUsize = AtomicUsize::new(0);
/// How many events a request may send before the callback cancels it: the prompt's progress
/// event, the role chunk and a couple of tokens when streaming. A non-streamed request is
/// cancelled at its first `generate` progress event (16 tokens). Every request reaches
/// generation and parsing, none runs long.
pub const EVENT_LIMIT: usize = 4;

pub fn reset_events() {
    EVENTS.store(0, Ordering::SeqCst);
}

/// The host callback: checks the event is JSON with a `type`, and cancels after a few events.
///
/// # Safety
/// Called by llb with a NUL-terminated string.
pub unsafe extern "C" fn on_event(event_json: *const c_char, _user: *mut c_void) -> i32 {
    // SAFETY: per llb's contract the string is valid during the call.
    let text = unsafe { CStr::from_ptr(event_json) }.to_str().expect("event is not UTF-8");
    let v: serde_json::Value = serde_json::from_str(text).expect("event is not JSON");
    assert!(v["type"].is_string(), "event without a type: {text}");
    let n = EVENTS.fetch_add(1, Ordering::SeqCst) + 1;
    i32::from(n >= EVENT_LIMIT || v["stage"] == "generate")
}

/// Opens an engine from a config text; None when llb refused it (the create_failure event
/// went to [`on_event`]).
pub fn create(config: &CStr) -> Option<*mut ffi::llb_chat> {
    // SAFETY: a valid C string; the callback needs no user data.
    let e = unsafe { ffi::llb_chat_create(config.as_ptr(), Some(on_event), std::ptr::null_mut()) };
    (!e.is_null()).then_some(e)
}

/// The config of the engine the request target uses: one thread, a small context.
pub fn engine_config() -> String {
    serde_json::json!({"model_path": fixture_model(), "n_ctx": 1024, "n_batch": 256, "n_threads": 1, "seed": 1})
        .to_string()
}

/// Checks the shape every llb answer has: an object with a `type`, or a completion.
pub fn check_answer(v: &serde_json::Value) {
    static PRINT: OnceLock<bool> = OnceLock::new();
    if *PRINT.get_or_init(|| std::env::var_os("LLB_FUZZ_PRINT").is_some()) {
        eprintln!("llb answered: {v}");
    }
    let ok = v["type"].is_string() || v["object"] == "chat.completion";
    assert!(ok, "unexpected answer: {v}");
    if v["type"] == "error" {
        assert!(v["code"].is_string() && v["message"].is_string(), "error without code/message: {v}");
        assert_ne!(v["code"], "internal", "llb reported an internal error (a caught panic or C++ exception): {v}");
    }
}
