//! The C ABI. This module only converts and guards (STYLE §11): every export runs inside
//! [`guard`], which catches panics, and every pointer cast of the ABI happens here.
//!
//! Ownership, in the words the header repeats: every returned `char *` is owned by the caller
//! and released with `llb_string_free` exactly once; it is never NULL.

use crate::error::{Error, ErrorCode};
use serde_json::Value;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
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
/// `{"type":"version","llb":"x.y.z","abi":1,"llama_cpp":{"commit":...,"chat_stack":...,"source":...}}`.
///
/// Ownership: the caller owns the returned string; release it with `llb_string_free` exactly once.
/// Never returns NULL.
///
/// Threads: may be called from any thread, concurrently with anything.
#[no_mangle]
pub extern "C" fn llb_version() -> *mut c_char {
    guard(internal_c, || into_c(&crate::version()))
}

/// Reports what the chat template of the GGUF at `gguf_path` can do, reading the file's header
/// only (no weights are loaded): `{"type":"model_info","supports_tools":bool,"caps":{...},
/// "caps_source":"tool_use"|"default"|"chatml_fallback",...}`. `caps` is llama.cpp's caps map,
/// taken from the `tool_use` template variant when the file has one.
///
/// `gguf_path`: a NUL-terminated UTF-8 path; not retained after return. NULL or invalid UTF-8
/// gives an `invalid_argument` error.
///
/// Errors (as `{"type":"error","code":...,"message":...}`): `invalid_argument`,
/// `file_not_found`, `io_error`, `not_a_gguf` (bad magic, truncated or corrupt),
/// `template_error` (the default template does not parse), `internal`.
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
