//! ggml's backends and devices (CPU, CUDA, Vulkan, Metal, RPC: whatever this build compiled in),
//! and the device/memory fields of the engine config turned into llama.cpp's model and context
//! params. llb writes no backend of its own: it selects and configures llama.cpp's.
//!
//! Also the process-wide setup of llama.cpp ([`init_backend`]) and its calls that a lost RPC
//! server could abort, guarded (native/rpc_guard.h). The engine and the model registry build on
//! this module; it calls neither.

use crate::error::{bail, Error, ErrorCode, Result};
use crate::request::wire::{EngineConfig, FlashAttn, KvType, SplitMode};
use crate::shim;
use crate::sys;
use serde_json::{json, Value};
use std::ffi::{c_char, CStr};
use std::sync::Once;

/// One-time process setup: llama.cpp's backend and logging (silent unless `LLB_LOG=1`), and the
/// backends llb adds to ggml's registry. Every entry point that reaches llama.cpp calls it first;
/// later calls return at once.
///
/// Threads: any thread; concurrent first calls wait for the one that runs the setup.
pub fn init_backend() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let verbose = std::env::var("LLB_LOG").map(|v| !v.is_empty() && v != "0").unwrap_or(false);
        shim::set_logging(verbose);
        // SAFETY: called once per process, before any other llama.cpp use by llb.
        unsafe { sys::llama_backend_init() };
        // LLB_CPU_VARIANTS=1 builds: the best CPU module for this machine (src/cpu_variant.rs).
        #[cfg(llb_backend_dl)]
        crate::cpu_variant::load();
        register_builtin();
    });
}

/// Adds the backends llb compiles itself to ggml's registry: the RPC client (build.rs, build_rpc).
/// Called once, by [`init_backend`].
fn register_builtin() {
    // SAFETY: no preconditions; installs ggml's abort callback and the RPC peer timeout once,
    // before any RPC socket exists.
    unsafe { sys::llb_rpc_guard_install(rpc_peer_timeout().unwrap_or(RPC_PEER_TIMEOUT_DEFAULT)) };
    #[cfg(llb_rpc)]
    {
        // SAFETY: ggml-rpc.h, linked in RPC builds (cfg llb_rpc); the registry it returns is
        // static; called once.
        unsafe { sys::ggml_backend_register(sys::ggml_backend_rpc_reg()) };
    }
}

/// How long an RPC server's machine may stay silent before its connection counts as lost
/// (native/rpc_guard.cpp): `LLB_RPC_PEER_TIMEOUT` in seconds, 2 to 3600, default 20.
const RPC_PEER_TIMEOUT_DEFAULT: i32 = 20;

/// `LLB_RPC_PEER_TIMEOUT` read and checked: a bad value is an error at create for configs with
/// `rpc_servers` (rpc_add); init falls back to the default, as no RPC socket exists before that.
fn rpc_peer_timeout() -> Result<i32> {
    parse_peer_timeout(std::env::var("LLB_RPC_PEER_TIMEOUT").ok().as_deref())
}

fn parse_peer_timeout(v: Option<&str>) -> Result<i32> {
    match v.map(|v| (v, v.trim().parse::<i32>())) {
        None => Ok(RPC_PEER_TIMEOUT_DEFAULT),
        Some((_, Ok(s))) if (2..=3600).contains(&s) => Ok(s),
        Some((v, _)) => Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("LLB_RPC_PEER_TIMEOUT={v:?} is not a whole number of seconds from 2 to 3600"),
        )),
    }
}

/// `ggml_backend_rpc_add_server`'s type, as the RPC registry's proc address gives it.
type RpcAddServer = unsafe extern "C" fn(*const c_char) -> sys::ggml_backend_reg_t;

/// RPC servers registered in this process (endpoint → its device names). ggml's registry is
/// process-wide and has no removal, so each endpoint is added once.
static RPC: std::sync::Mutex<Vec<(String, Vec<String>)>> = std::sync::Mutex::new(Vec::new());

fn rpc_device_names() -> Vec<String> {
    RPC.lock().unwrap_or_else(|e| e.into_inner()).iter().flat_map(|(_, d)| d.clone()).collect()
}

/// Checks `host:port`, that the server answers a TCP connect within 3 s, and registers it with
/// llama.cpp's RPC backend (`ggml_backend_rpc_add_server`, as llama-server's `--rpc` does).
/// Returns its devices' names.
fn rpc_add(endpoint: &str) -> Result<Vec<String>> {
    use std::net::{TcpStream, ToSocketAddrs};
    let bad =
        || Error::new(ErrorCode::InvalidArgument, format!("field `rpc_servers`: `{endpoint}` is not `host:port`"));
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    rpc_peer_timeout()?;
    if let Some((_, d)) = RPC.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(e, _)| e == endpoint) {
        return Ok(d.clone());
    }
    init_backend();
    // SAFETY: a NUL-terminated literal.
    let reg = unsafe { sys::ggml_backend_reg_by_name(c"RPC".as_ptr()) };
    if reg.is_null() {
        return Err(Error::new(
            ErrorCode::DeviceUnavailable,
            "field `rpc_servers`: this llb was built without the RPC backend (LLB_RPC=0)",
        ));
    }
    let unreachable = |why: String| {
        Error::new(ErrorCode::DeviceUnavailable, format!("field `rpc_servers`: cannot reach `{endpoint}`: {why}"))
    };
    let addr = endpoint
        .to_socket_addrs()
        .map_err(|e| unreachable(e.to_string()))?
        .next()
        .ok_or_else(|| unreachable("no address".into()))?;
    TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)).map_err(|e| unreachable(e.to_string()))?;
    // SAFETY: reg is the RPC registry, alive for the process; the name is a NUL-terminated literal.
    let f = unsafe { sys::ggml_backend_reg_get_proc_address(reg, c"ggml_backend_rpc_add_server".as_ptr()) };
    if f.is_null() {
        return Err(Error::new(ErrorCode::Internal, "the RPC backend has no ggml_backend_rpc_add_server"));
    }
    // SAFETY: f is ggml_backend_rpc_add_server's address (ggml-rpc.h:
    // `ggml_backend_reg_t ggml_backend_rpc_add_server(const char * endpoint)`), non-NULL.
    let add: RpcAddServer = unsafe { std::mem::transmute::<*mut std::ffi::c_void, RpcAddServer>(f) };
    let c = std::ffi::CString::new(endpoint).map_err(|_| bad())?;
    let mut err = [0 as c_char; 512];
    // SAFETY: add is the function above; c is NUL-terminated and err writable for its length,
    // both alive for the call.
    let server = unsafe { sys::llb_guarded_rpc_add(Some(add), c.as_ptr(), err.as_mut_ptr(), err.len()) };
    if server.is_null() {
        // SAFETY: err is NUL-terminated (zeroed, and the guard writes at most len - 1 bytes).
        let why = unsafe { text(err.as_ptr()) };
        return Err(unreachable(if why.is_empty() { "the RPC backend refused it".into() } else { why }));
    }
    // SAFETY: server is a registry the RPC backend made, alive for the process; ggml_backend_register
    // takes it once (the endpoint is added once, above); indices are in range.
    let names = unsafe {
        sys::ggml_backend_register(server);
        (0..sys::ggml_backend_reg_dev_count(server))
            .map(|i| text(sys::ggml_backend_dev_name(sys::ggml_backend_reg_dev_get(server, i))))
            .collect::<Vec<_>>()
    };
    RPC.lock().unwrap_or_else(|e| e.into_inner()).push((endpoint.to_string(), names.clone()));
    Ok(names)
}

/// Set once an RPC exchange failed in this process (a server died or the connection broke).
static RPC_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a model loaded with `devices` would be freed on a possibly dead RPC server: llama.cpp
/// frees RPC buffers in destructors, where ggml's abort on a lost connection cannot be turned
/// into an error. Such models and contexts are leaked instead (docs/scaling.md).
pub fn must_leak(uses_rpc: bool) -> bool {
    uses_rpc && RPC_LOST.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether any of `devices` is an RPC server's.
pub fn uses_rpc(devices: Option<&[String]>) -> bool {
    let rpc = rpc_device_names();
    devices.is_some_and(|d| d.iter().any(|n| rpc.contains(n)))
}

fn rpc_lost(why: String) -> Error {
    RPC_LOST.store(true, std::sync::atomic::Ordering::SeqCst);
    Error::new(ErrorCode::DeviceUnavailable, format!("an RPC server was lost: {why}"))
}

/// `llama_decode`, with a lost RPC server an error (`device_unavailable`) instead of an abort.
///
/// # Safety
/// `ctx` is a live context and `batch` is filled within its capacity.
pub unsafe fn decode(ctx: *mut sys::llama_context, batch: sys::llama_batch) -> Result<i32> {
    let mut err = [0 as c_char; 512];
    // SAFETY: the caller's context and batch (see above); err is writable for its length.
    let rc = unsafe { sys::llb_guarded_decode(ctx, batch, err.as_mut_ptr(), err.len()) };
    if rc == i32::MIN {
        // SAFETY: the guard wrote a NUL-terminated message into err.
        return Err(rpc_lost(unsafe { text(err.as_ptr()) }));
    }
    Ok(rc)
}

/// `llama_model_load_from_file`, guarded the same way (NULL on failure).
///
/// # Safety
/// `path` is a NUL-terminated string and `params`' arrays live through the call.
pub unsafe fn load_model(path: *const c_char, params: sys::llama_model_params) -> *mut sys::llama_model {
    // SAFETY: the caller's path and params (see above).
    unsafe { sys::llb_guarded_model_load(path, params) }
}

/// `llama_init_from_model`, guarded: Err(device_unavailable) when an RPC server is lost, Ok(NULL)
/// when llama.cpp refuses the params.
///
/// # Safety
/// `model` is a live model.
pub unsafe fn init_context(
    model: *mut sys::llama_model,
    params: sys::llama_context_params,
) -> Result<*mut sys::llama_context> {
    let mut err = [0 as c_char; 512];
    // SAFETY: the caller's live model; err is writable for its length.
    let ctx = unsafe { sys::llb_guarded_init_context(model, params, err.as_mut_ptr(), err.len()) };
    if ctx.is_null() && err[0] != 0 {
        // SAFETY: the guard wrote a NUL-terminated message into err.
        return Err(rpc_lost(unsafe { text(err.as_ptr()) }));
    }
    Ok(ctx)
}

/// A C string from ggml or the guard, copied ("" for NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string alive for the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// One ggml device.
#[derive(Debug, Clone)]
pub struct Device {
    pub raw: sys::ggml_backend_dev_t,
    pub name: String,
    pub description: String,
    pub kind: &'static str,
    pub memory_free: u64,
    pub memory_total: u64,
}

impl Device {
    /// GPUs (dedicated or integrated) are what layers are offloaded to; the CPU is always used.
    pub fn is_gpu(&self) -> bool {
        self.kind == "gpu" || self.kind == "igpu"
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "type": self.kind,
            "memory_free": self.memory_free,
            "memory_total": self.memory_total,
        })
    }
}

/// Every device of every registered backend, in ggml's order.
pub fn devices() -> Vec<Device> {
    init_backend();
    // SAFETY: the registry is initialised (init_backend); indices are in range; ggml's device
    // names and descriptions are NUL-terminated and live for the process.
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|i| {
                let raw = sys::ggml_backend_dev_get(i);
                let (mut free, mut total) = (0usize, 0usize);
                // An RPC device asks its server, which may be gone: then 0 and 0.
                if !sys::llb_guarded_dev_memory(raw, &mut free, &mut total) {
                    RPC_LOST.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Device {
                    raw,
                    name: text(sys::ggml_backend_dev_name(raw)),
                    description: text(sys::ggml_backend_dev_description(raw)),
                    kind: match sys::ggml_backend_dev_type(raw) {
                        sys::GGML_BACKEND_DEVICE_TYPE_CPU => "cpu",
                        sys::GGML_BACKEND_DEVICE_TYPE_GPU => "gpu",
                        sys::GGML_BACKEND_DEVICE_TYPE_IGPU => "igpu",
                        sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => "accel",
                        _ => "other",
                    },
                    memory_free: free as u64,
                    memory_total: total as u64,
                }
            })
            .collect()
    }
}

/// The names of the compiled-in backends (`CPU`, `CUDA`, `Vulkan`, `Metal`, `RPC`, ...).
pub fn backends() -> Vec<String> {
    init_backend();
    // SAFETY: as in devices(): registry names live for the process.
    unsafe {
        (0..sys::ggml_backend_reg_count())
            .map(|i| text(sys::ggml_backend_reg_name(sys::ggml_backend_reg_get(i))))
            .collect()
    }
}

/// Whether a device does every step's work: every layer and the output offloaded (`-1` is only
/// ever set when a GPU or RPC device is there; llama.cpp counts the output as layer
/// `n_layer + 1`) and the KV cache with them. The host's compute threads then only wait, and
/// tuning their count step by step measures noise (issue 31: 38-969 re-tunes per run on an
/// H100 for no gain).
pub fn device_does_the_work(load: &LoadParams, ctx: &ContextParams, n_layer: i32) -> bool {
    let all_layers = load.n_gpu_layers == -1 || load.n_gpu_layers > n_layer;
    all_layers && ctx.offload_kqv
}

/// The model-load side of the config: part of the key under which loaded models are shared
/// (two engines share weights only when they load them the same way).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadParams {
    pub n_gpu_layers: i32,
    pub main_gpu: i32,
    pub split_mode: SplitMode,
    pub tensor_split: Vec<f32>,
    /// Device names; None = llama.cpp's choice (every GPU and registered RPC server).
    pub devices: Option<Vec<String>>,
    pub use_mmap: bool,
    pub use_mlock: bool,
}

impl Default for LoadParams {
    fn default() -> Self {
        LoadParams {
            n_gpu_layers: -1,
            main_gpu: 0,
            split_mode: SplitMode::Layer,
            tensor_split: Vec::new(),
            devices: None,
            use_mmap: true,
            use_mlock: false,
        }
    }
}

impl LoadParams {
    /// The registry key part: equal params, equal key.
    pub fn key(&self) -> String {
        format!("{self:?}")
    }

    /// Calls `f` with llama.cpp's model params for these settings (the device list and the
    /// split array live for the call).
    pub fn with_raw<T>(&self, f: impl FnOnce(sys::llama_model_params) -> T) -> Result<T> {
        // SAFETY: plain struct of defaults.
        let mut p = unsafe { sys::llama_model_default_params() };
        p.n_gpu_layers = self.n_gpu_layers;
        p.main_gpu = self.main_gpu;
        p.split_mode = match self.split_mode {
            SplitMode::None => sys::LLAMA_SPLIT_MODE_NONE,
            SplitMode::Layer => sys::LLAMA_SPLIT_MODE_LAYER,
            SplitMode::Row => sys::LLAMA_SPLIT_MODE_ROW,
        };
        p.use_mmap = self.use_mmap;
        p.use_mlock = self.use_mlock;
        // llama.cpp reads llama_max_devices() floats when tensor_split is set.
        // SAFETY: no preconditions.
        let max = unsafe { sys::llama_max_devices() }.max(self.tensor_split.len());
        let mut split = self.tensor_split.clone();
        split.resize(max, 0.0);
        if !self.tensor_split.is_empty() {
            p.tensor_split = split.as_ptr();
        }
        let all = devices();
        let mut devs: Vec<sys::ggml_backend_dev_t> = Vec::new();
        for name in self.devices.iter().flatten() {
            let d = all.iter().find(|d| &d.name == name).ok_or_else(|| unknown_device(name, &all))?;
            devs.push(d.raw);
        }
        devs.push(std::ptr::null_mut());
        if self.devices.is_some() {
            p.devices = devs.as_mut_ptr();
        }
        Ok(f(p))
    }
}

fn gpu_names(all: &[Device]) -> String {
    let g: Vec<&str> = all.iter().filter(|d| d.is_gpu()).map(|d| d.name.as_str()).collect();
    if g.is_empty() {
        "this build and machine have no GPU device (see llb_devices)".into()
    } else {
        format!("the GPU devices here are {}", g.join(", "))
    }
}

fn unknown_device(name: &str, all: &[Device]) -> Error {
    Error::new(ErrorCode::DeviceUnavailable, format!("field `devices`: no device named `{name}`: {}", gpu_names(all)))
}

/// The context side of the config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextParams {
    pub flash_attn: sys::llama_flash_attn_type,
    pub offload_kqv: bool,
    pub type_k: sys::ggml_type,
    pub type_v: sys::ggml_type,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            flash_attn: sys::LLAMA_FLASH_ATTN_TYPE_AUTO,
            offload_kqv: true,
            type_k: sys::GGML_TYPE_F16,
            type_v: sys::GGML_TYPE_F16,
        }
    }
}

impl ContextParams {
    pub fn apply(&self, cp: &mut sys::llama_context_params) {
        cp.flash_attn_type = self.flash_attn;
        cp.offload_kqv = self.offload_kqv;
        cp.type_k = self.type_k;
        cp.type_v = self.type_v;
    }

    /// KV bytes per token per (layer × KV head dimension): (K + V row bytes) per element.
    pub fn kv_bytes_per_element(&self) -> f64 {
        kv_type_bytes(self.type_k) + kv_type_bytes(self.type_v)
    }
}

/// Bytes per element of a KV cache type (block bytes / block size).
pub fn kv_type_bytes(t: sys::ggml_type) -> f64 {
    // SAFETY: valid ggml types.
    unsafe { sys::ggml_type_size(t) as f64 / sys::ggml_blck_size(t) as f64 }
}

fn ggml_kv_type(t: KvType) -> sys::ggml_type {
    match t {
        KvType::F16 => sys::GGML_TYPE_F16,
        KvType::Q8_0 => sys::GGML_TYPE_Q8_0,
        KvType::Q4_0 => sys::GGML_TYPE_Q4_0,
    }
}

/// Checks the device and memory fields of `config` against this build's devices and resolves
/// them. Bad values are `invalid_argument`, a device that is not here `device_unavailable`.
pub fn resolve(config: &EngineConfig) -> Result<(LoadParams, ContextParams)> {
    let rpc = register_rpc_servers(config)?;
    let all = devices();
    let mut lp = LoadParams { devices: chosen_devices(config, &all, &rpc)?, ..LoadParams::default() };
    // The GPUs the model would use: the listed ones, else every GPU.
    let n_gpus = match &lp.devices {
        None => all.iter().filter(|d| d.is_gpu()).count(),
        Some(d) => d.len(),
    };
    place_layers(config, &all, n_gpus, &mut lp)?;
    if let Some(v) = config.use_mmap {
        lp.use_mmap = v;
    }
    if let Some(v) = config.use_mlock {
        // SAFETY: no preconditions.
        if v && !unsafe { sys::llama_supports_mlock() } {
            bail!(InvalidArgument, "field `use_mlock`: this platform has no mlock");
        }
        lp.use_mlock = v;
    }
    Ok((lp, context_params(config)?))
}

/// Registers the config's `rpc_servers` (each checked: `rpc_add`); their device names.
fn register_rpc_servers(config: &EngineConfig) -> Result<Vec<String>> {
    let mut rpc = Vec::new();
    if let Some(servers) = &config.rpc_servers {
        if servers.is_empty() {
            bail!(InvalidArgument, "field `rpc_servers`: an empty list; leave the field out to use none");
        }
        for s in servers {
            rpc.extend(rpc_add(s)?);
        }
    }
    Ok(rpc)
}

/// The devices llama.cpp is given: the config's `devices` (checked against `all`) plus this
/// engine's RPC devices `rpc`; None is llama.cpp's default (every GPU).
fn chosen_devices(config: &EngineConfig, all: &[Device], rpc: &[String]) -> Result<Option<Vec<String>>> {
    // `["none"]`, as llama.cpp's `--device none`: no GPU at all, not even for the big batches
    // llama.cpp would otherwise hand to a GPU while every layer stays on the CPU.
    let none = config.devices.as_deref().is_some_and(|d| d.iter().any(|n| n == "none"));
    if none && config.devices.as_ref().is_some_and(|d| d.len() > 1) {
        bail!(InvalidArgument, "field `devices`: `none` (the CPU only) cannot be listed with other devices");
    }
    for name in config.devices.iter().flatten().filter(|_| !none) {
        match all.iter().find(|d| &d.name == name) {
            None => return Err(unknown_device(name, all)),
            Some(d) if !d.is_gpu() => bail!(
                InvalidArgument,
                "field `devices`: `{name}` is a {} device; list GPUs only (the CPU is always used for what is not offloaded)",
                d.kind
            ),
            Some(_) => {}
        }
    }
    let mut chosen = None;
    if let Some(d) = &config.devices {
        if d.is_empty() {
            bail!(InvalidArgument, "field `devices`: an empty list; leave the field out to use every GPU");
        }
        let mut seen = d.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != d.len() {
            bail!(InvalidArgument, "field `devices`: a device is listed twice");
        }
        chosen = Some(if none { Vec::new() } else { d.clone() });
    }
    // RPC servers registered for other engines are not this one's: name the devices explicitly
    // whenever any are registered (llama.cpp's default would take every registered server).
    let registered_rpc = rpc_device_names();
    match &mut chosen {
        None if !registered_rpc.is_empty() => {
            let mut d: Vec<String> = all
                .iter()
                .filter(|d| d.is_gpu() && !registered_rpc.contains(&d.name))
                .map(|d| d.name.clone())
                .collect();
            d.extend(rpc.iter().cloned());
            chosen = Some(d);
        }
        None => {}
        Some(d) => {
            let more: Vec<String> = rpc.iter().filter(|r| !d.contains(r)).cloned().collect();
            d.extend(more);
        }
    }
    Ok(chosen)
}

/// `n_gpu_layers`, `main_gpu`, `split_mode` and `tensor_split`, checked against the `n_gpus` the
/// model would use.
fn place_layers(config: &EngineConfig, all: &[Device], n_gpus: usize, lp: &mut LoadParams) -> Result<()> {
    match config.n_gpu_layers {
        None | Some(-1) => lp.n_gpu_layers = if n_gpus > 0 { -1 } else { 0 },
        Some(n) if n < -1 => bail!(InvalidArgument, "field `n_gpu_layers`: {n}; use 0 to N layers, or -1 for all"),
        Some(n) if n > 0 && n_gpus == 0 => {
            return Err(Error::new(
                ErrorCode::DeviceUnavailable,
                format!("field `n_gpu_layers`: {n} layers asked for a GPU, but {}", gpu_names(all)),
            ))
        }
        Some(n) => lp.n_gpu_layers = n,
    }
    if let Some(m) = config.main_gpu {
        if m < 0 {
            bail!(InvalidArgument, "field `main_gpu`: {m} is negative");
        }
        if m as usize >= n_gpus {
            return Err(Error::new(
                ErrorCode::DeviceUnavailable,
                format!("field `main_gpu`: there is no GPU {m}: {}", gpu_names(all)),
            ));
        }
        lp.main_gpu = m;
    }
    if let Some(s) = config.split_mode {
        lp.split_mode = s;
    }
    // llama.cpp's `none` takes device `main_gpu`, and refuses the load when there is none; -1
    // is its "no device" (CPU only).
    if lp.split_mode == SplitMode::None && n_gpus == 0 {
        lp.main_gpu = -1;
    }
    if let Some(ts) = &config.tensor_split {
        if ts.iter().any(|v| !v.is_finite() || *v < 0.0) || ts.iter().sum::<f32>() <= 0.0 {
            bail!(InvalidArgument, "field `tensor_split`: proportions must be finite, non-negative and not all zero");
        }
        // SAFETY: no preconditions.
        let max = unsafe { sys::llama_max_devices() };
        if ts.len() > n_gpus.max(1) || ts.len() > max {
            return Err(Error::new(
                ErrorCode::DeviceUnavailable,
                format!("field `tensor_split`: {} proportions for {n_gpus} GPU(s): {}", ts.len(), gpu_names(all)),
            ));
        }
        lp.tensor_split = ts.clone();
    }
    Ok(())
}

/// The KV cache and attention fields (`offload_kqv`, `type_k`, `type_v`, `flash_attn`).
fn context_params(config: &EngineConfig) -> Result<ContextParams> {
    let mut cp = ContextParams::default();
    if let Some(v) = config.offload_kqv {
        cp.offload_kqv = v;
    }
    cp.type_k = ggml_kv_type(config.type_k.unwrap_or(KvType::F16));
    cp.type_v = ggml_kv_type(config.type_v.unwrap_or(KvType::F16));
    let v_quantized = config.type_v.is_some_and(|t| t != KvType::F16);
    cp.flash_attn = match config.flash_attn {
        Some(FlashAttn::Off) if v_quantized => bail!(
            InvalidArgument,
            "field `type_v`: a quantized V cache needs flash attention (llama.cpp), and `flash_attn` is `off`"
        ),
        Some(FlashAttn::Off) => sys::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        Some(FlashAttn::On) => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
        // auto could resolve to off on a device without flash attention, and llama.cpp would
        // then refuse the quantized V cache: ask for it.
        None | Some(FlashAttn::Auto) if v_quantized => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
        None | Some(FlashAttn::Auto) => sys::LLAMA_FLASH_ATTN_TYPE_AUTO,
    };
    Ok(cp)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31: the thread tuner stays off only when a device does every step's work.
    #[test]
    fn a_device_does_the_work_only_with_every_layer_and_the_kv_cache_on_it() {
        let load = |n| LoadParams { n_gpu_layers: n, ..LoadParams::default() };
        let ctx = ContextParams::default();
        assert!(device_does_the_work(&load(-1), &ctx, 28));
        assert!(device_does_the_work(&load(29), &ctx, 28), "n_layer + 1 counts the output");
        assert!(!device_does_the_work(&load(28), &ctx, 28), "the output layer stays on the CPU");
        assert!(!device_does_the_work(&load(0), &ctx, 28), "CPU only");
        let kv_on_host = ContextParams { offload_kqv: false, ..ContextParams::default() };
        assert!(!device_does_the_work(&load(-1), &kv_on_host, 28), "attention runs on the host");
    }

    #[test]
    fn the_rpc_peer_timeout_is_checked() {
        assert_eq!(parse_peer_timeout(None).unwrap(), RPC_PEER_TIMEOUT_DEFAULT);
        assert_eq!(parse_peer_timeout(Some("4")).unwrap(), 4);
        assert_eq!(parse_peer_timeout(Some("3600")).unwrap(), 3600);
        for bad in ["1", "3601", "-5", "20s", ""] {
            let e = parse_peer_timeout(Some(bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
            assert!(e.message.contains("LLB_RPC_PEER_TIMEOUT"), "{bad}: {}", e.message);
        }
    }
}
