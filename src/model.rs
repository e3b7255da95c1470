//! Loaded models, shared: engines opened on the same file share one `llama_model`
//! (reference-counted); the weights are freed when the last engine goes.

use crate::backend::{self, ContextParams, LoadParams};
use crate::error::{bail, Error, ErrorCode, Result};
use crate::shim::Templates;
use crate::sys;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

pub struct Model {
    raw: *mut sys::llama_model,
    /// Unique among the models this process ever loaded (never reused, unlike an address).
    pub id: u64,
    pub path: PathBuf,
    /// Some layers live on RPC servers.
    pub uses_rpc: bool,
}

// SAFETY: a llama_model is immutable after loading and llama.cpp allows contexts on several
// threads to share it; it is freed once, by Drop.
unsafe impl Send for Model {}
// SAFETY: as for Send: every use of `raw` through `&Model` is a read of the immutable model.
unsafe impl Sync for Model {}

impl Model {
    pub fn raw(&self) -> *mut sys::llama_model {
        self.raw
    }

    pub fn vocab(&self) -> *const sys::llama_vocab {
        // SAFETY: raw is a live model.
        unsafe { sys::llama_model_get_vocab(self.raw) }
    }

    /// How many tokens the model's vocabulary has (a logits row's length).
    pub fn n_vocab(&self) -> usize {
        // SAFETY: the vocabulary of a live model.
        unsafe { sys::llama_vocab_n_tokens(self.vocab()) }.max(0) as usize
    }

    /// Key and value elements one token takes in the KV cache: layers × head size × KV heads
    /// (the usual layout; an estimate for sizing checks).
    pub fn kv_elements_per_token(&self) -> u64 {
        // SAFETY: the model is alive while `self` is.
        let (n_layer, n_embd, n_head, n_head_kv) = unsafe {
            (
                sys::llama_model_n_layer(self.raw).max(0) as u64,
                sys::llama_model_n_embd(self.raw).max(0) as u64,
                sys::llama_model_n_head(self.raw).max(1) as u64,
                sys::llama_model_n_head_kv(self.raw).max(0) as u64,
            )
        };
        n_layer * (n_embd / n_head) * n_head_kv
    }

    /// What llama-server's warm-up decodes: BOS and EOS where the vocabulary has them, else
    /// token 0.
    pub fn warm_up_tokens(&self) -> Vec<sys::llama_token> {
        // SAFETY: the vocabulary of a live model.
        let (bos, eos) = unsafe { (sys::llama_vocab_bos(self.vocab()), sys::llama_vocab_eos(self.vocab())) };
        let tokens: Vec<sys::llama_token> = [bos, eos].into_iter().filter(|&t| t >= 0).collect();
        if tokens.is_empty() {
            vec![0]
        } else {
            tokens
        }
    }

    /// Whether the model's memory can cut a sequence (not recurrent, not hybrid): drafted tokens
    /// can be taken back, and a kept state's cells checked one by one.
    pub fn can_cut(&self) -> bool {
        // SAFETY: raw is a live model.
        unsafe { !sys::llama_model_is_recurrent(self.raw) && !sys::llama_model_is_hybrid(self.raw) }
    }

    /// The model's chat templates (llama.cpp's `common_chat_templates_init`).
    pub fn templates(&self) -> Result<Templates> {
        // SAFETY: raw is a live model for the call.
        unsafe { Templates::from_model(self.raw) }
    }

    /// How many repeating layers the model has.
    pub fn n_layer(&self) -> i32 {
        // SAFETY: raw is a live model.
        unsafe { sys::llama_model_n_layer(self.raw) }
    }

    /// Checks that a quantized KV type's blocks divide this model's attention heads (ggml stores
    /// the cache per head); llama.cpp would refuse or assert otherwise.
    pub fn check_kv_types(&self, cp: &ContextParams) -> Result<()> {
        // SAFETY: raw is a live model.
        let head = unsafe { sys::llama_model_n_embd(self.raw) / sys::llama_model_n_head(self.raw).max(1) };
        for (field, t) in [("type_k", cp.type_k), ("type_v", cp.type_v)] {
            // SAFETY: a valid ggml type.
            let blck = unsafe { sys::ggml_blck_size(t) } as i32;
            if blck > 1 && head % blck != 0 {
                bail!(
                    InvalidArgument,
                    "field `{field}`: this model's attention heads have {head} dimensions, not a multiple of the \
                     {blck}-element blocks of that cache type; use f16"
                );
            }
        }
        Ok(())
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if backend::must_leak(self.uses_rpc) {
            return;
        }
        // SAFETY: raw was loaded here and is freed once, after every context using it is gone
        // (each engine holds an Arc<Model> and frees its context first).
        unsafe { sys::llama_model_free(self.raw) }
    }
}

/// After a host destroys an engine or pool: hands the pages malloc keeps free back to the OS
/// (glibc keeps them per thread arena; a model's vocabulary, its grammar engine's token trie and
/// a context's buffers are megabytes freed by worker threads), so a host's RSS returns after an
/// unload instead of stepping up with each arena that served one.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the OS; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

type Registry = HashMap<(PathBuf, String), Weak<Model>>;
/// Keyed by the file and how it is loaded (GPU layers, devices, mmap: see `LoadParams::key`).
static MODELS: Lazy<Mutex<Registry>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// How many distinct models are loaded now (for tests and diagnostics).
pub fn loaded_count() -> usize {
    let mut m = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    m.retain(|_, w| w.strong_count() > 0);
    m.len()
}

/// The registry key and the path given to llama.cpp: the folder resolved, the file name kept. A
/// Hugging Face snapshot entry is a symlink to a blob named by its sha256, and llama.cpp finds a
/// split model's other shards by the first shard's file name, so the link itself is not resolved.
fn model_key(path: &Path) -> PathBuf {
    std::path::absolute(path)
        .ok()
        .and_then(|a| Some(std::fs::canonicalize(a.parent()?).ok()?.join(a.file_name()?)))
        .unwrap_or_else(|| path.to_path_buf())
}

/// How many engines hold the model loaded from `path` (0 when it is not loaded).
pub fn holders(path: &Path) -> usize {
    let key = model_key(path);
    let m = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    m.iter().filter(|((p, _), _)| *p == key).map(|(_, w)| w.strong_count()).sum()
}

/// Returns the loaded model for `path`, loading it (llama.cpp's default params) if no engine holds it.
pub fn acquire(path: &Path) -> Result<Arc<Model>> {
    acquire_with(path, &LoadParams::default())
}

/// Returns the model loaded from `path` with `params`, loading it if no engine holds it so.
pub fn acquire_with(path: &Path, params: &LoadParams) -> Result<Arc<Model>> {
    let path_key = model_key(path);
    let key = (path_key.clone(), params.key());
    // The lock is held across the load so that two engines opened at once load the file once.
    let mut models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = models.get(&key).and_then(Weak::upgrade) {
        return Ok(m);
    }
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path_key.as_os_str().as_bytes())
        .map_err(|_| Error::new(ErrorCode::InvalidArgument, "path contains a NUL byte"))?;
    // SAFETY: params built for this call (their arrays live through it) and a valid path; a
    // NULL result is handled.
    let raw = params.with_raw(|p| unsafe { backend::load_model(c.as_ptr(), p) })?;
    if raw.is_null() {
        return Err(Error::new(
            ErrorCode::ModelLoadFailed,
            format!(
                "llama.cpp could not load {} with n_gpu_layers={}, split_mode={:?}{} (set LLB_LOG=1 for its log)",
                path.display(),
                params.n_gpu_layers,
                params.split_mode,
                params.devices.as_ref().map_or(String::new(), |d| format!(", devices {d:?}"))
            ),
        ));
    }
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let m = Arc::new(Model { raw, id, path: path_key, uses_rpc: backend::uses_rpc(params.devices.as_deref()) });
    models.retain(|_, w| w.strong_count() > 0);
    models.insert(key, Arc::downgrade(&m));
    Ok(m)
}
