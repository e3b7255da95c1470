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
    fn ggml_backend_dev_memory(dev: sys::ggml_backend_dev_t, free: *mut usize, total: *mut usize);
    fn ggml_backend_dev_type(dev: sys::ggml_backend_dev_t) -> u32;
    fn ggml_backend_reg_by_name(name: *const c_char) -> ggml_backend_reg_t;
    fn ggml_backend_reg_get_proc_address(reg: ggml_backend_reg_t, name: *const c_char) -> *mut std::ffi::c_void;
    fn ggml_backend_register(reg: ggml_backend_reg_t);
    fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize;
    fn ggml_backend_reg_dev_get(reg: ggml_backend_reg_t, index: usize) -> sys::ggml_backend_dev_t;
}
