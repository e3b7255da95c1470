//! `llb_model_info` on arbitrary file contents (written to a per-process folder, in /dev/shm
//! when it is there). When llb's own header reader accepts the file, llama.cpp's C GGUF reader
//! (`gguf_init_from_file`, no_alloc, with a ggml context for the tensor infos, as llama.cpp's
//! model loader calls it) must read it without crashing, aborting or allocating absurd memory:
//! `llb_chat_create` only hands llama.cpp files that llb's reader accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llb::{ffi, sys};
use llb_fuzz::{check_answer, take, work_dir};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

extern "C" {
    fn ggml_free(ctx: *mut sys::ggml_context);
}

fn input_path() -> &'static (std::path::PathBuf, CString) {
    static P: OnceLock<(std::path::PathBuf, CString)> = OnceLock::new();
    P.get_or_init(|| {
        let p = work_dir().join("input.gguf");
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        (p, c)
    })
}

fuzz_target!(|data: &[u8]| {
    let (path, c_path) = input_path();
    std::fs::write(path, data).expect("writing the input file");
    // SAFETY: a NUL-terminated path.
    let info = unsafe { take(ffi::llb_model_info(c_path.as_ptr())) };
    check_answer(&info);
    if llb::gguf::read_header(path).is_ok() {
        let mut ctx: *mut sys::ggml_context = std::ptr::null_mut();
        let params = sys::gguf_init_params { no_alloc: true, ctx: &mut ctx };
        // SAFETY: a valid path; what gguf_init_from_file returns is freed once.
        unsafe {
            let g = sys::gguf_init_from_file(c_path.as_ptr(), params);
            if !ctx.is_null() {
                ggml_free(ctx);
            }
            if !g.is_null() {
                sys::gguf_free(g);
            }
        }
    }
});
