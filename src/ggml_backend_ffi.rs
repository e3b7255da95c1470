// Declarations from the pinned tree's ggml/include/ggml-backend.h that src/backend.rs uses.
#[allow(non_camel_case_types)]
type ggml_backend_reg_t = *mut std::ffi::c_void;
extern "C" {
    fn ggml_backend_reg_count() -> usize;
    fn ggml_backend_reg_get(index: usize) -> ggml_backend_reg_t;
    fn ggml_backend_reg_name(reg: ggml_backend_reg_t) -> *const c_char;
    fn ggml_backend_dev_count() -> usize;
    fn ggml_backend_dev_get(index: usize) -> sys::ggml_backend_dev_t;
    fn ggml_backend_dev_name(dev: sys::ggml_backend_dev_t) -> *const c_char;
    fn ggml_backend_dev_description(dev: sys::ggml_backend_dev_t) -> *const c_char;
    fn ggml_backend_dev_type(dev: sys::ggml_backend_dev_t) -> u32;
    fn ggml_backend_reg_by_name(name: *const c_char) -> ggml_backend_reg_t;
    fn ggml_backend_reg_get_proc_address(reg: ggml_backend_reg_t, name: *const c_char) -> *mut std::ffi::c_void;
    fn ggml_backend_register(reg: ggml_backend_reg_t);
    fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize;
    fn ggml_backend_reg_dev_get(reg: ggml_backend_reg_t, index: usize) -> sys::ggml_backend_dev_t;
}

// native/rpc_guard.cpp: llama.cpp calls during which a ggml abort (a lost RPC server) becomes an
// error instead of the end of the process.
extern "C" {
    fn llb_rpc_guard_install(peer_timeout_seconds: std::ffi::c_int);
    fn llb_guarded_dev_memory(dev: sys::ggml_backend_dev_t, free: *mut usize, total: *mut usize) -> bool;
    fn llb_guarded_decode(ctx: *mut sys::llama_context, batch: sys::llama_batch, err: *mut c_char, len: usize) -> i32;
    fn llb_guarded_model_load(path: *const c_char, params: sys::llama_model_params) -> *mut sys::llama_model;
    fn llb_guarded_init_context(
        model: *mut sys::llama_model,
        params: sys::llama_context_params,
        err: *mut c_char,
        len: usize,
    ) -> *mut sys::llama_context;
    fn llb_guarded_rpc_add(
        add: unsafe extern "C" fn(*const c_char) -> ggml_backend_reg_t,
        endpoint: *const c_char,
        err: *mut c_char,
        len: usize,
    ) -> ggml_backend_reg_t;
}
