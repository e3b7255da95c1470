//! Which CPU kernels this process runs. A default build has one set, compiled into libllb for the
//! build machine (`GGML_NATIVE`) or for AVX2 (`LLB_PORTABLE=1`). A `LLB_CPU_VARIANTS=1` build
//! (scripts/release-jar.sh, docs/release.md) carries ggml's CPU backend as one module per CPU level
//! (`libggml-cpu-<variant>.so`) and lets ggml's registry load the best one for the running CPU:
//! [`load`] does that once per process, and [`report`] says what was chosen (`llb_version`).

use serde_json::{json, Value};

/// Loads ggml's backend modules (the best CPU variant, and CUDA where its module and a driver are
/// there) from the directory libllb was loaded from, else from the build's own directory (in-tree
/// tests and examples). Called once, by `backend::init_backend`.
///
/// `LLB_CPU_VARIANT=<variant>` (`haswell`, `sse42`, ...) loads that CPU module instead of the one
/// ggml would choose: to pin the kernels, or to step down from one a machine announces but cannot
/// run (a VM that reports AMX it does not give). A variant that is not there, or that this CPU
/// cannot run (its `ggml_backend_score` is 0), is recorded in `module_errors` and ggml chooses.
#[cfg(llb_backend_dl)]
pub fn load() {
    let mut dirs: Vec<std::path::PathBuf> = own_dir().into_iter().collect();
    if let Some(d) = option_env!("LLB_GGML_BACKEND_DIR") {
        dirs.push(d.into());
    }
    let Some(dir) = dirs.into_iter().find(|d| has_cpu_module(d)) else { return };
    let forced = std::env::var("LLB_CPU_VARIANT").ok().filter(|v| !v.is_empty());
    if forced.is_some_and(|v| forced_variant(&dir, &v)) {
        // The other modules (CUDA), each by its file: ggml's load-all would add a second CPU.
        for file in module_files(&dir).into_iter().filter(|f| !f.starts_with("libggml-cpu-")) {
            load_module(&dir.join(file));
        }
    } else {
        let Ok(c) = std::ffi::CString::new(dir.to_string_lossy().as_bytes()) else { return };
        // SAFETY: a NUL-terminated path; ggml copies it; called before any backend is used.
        unsafe { crate::sys::ggml_backend_load_all_from_path(c.as_ptr()) };
    }
    record_module_errors(&dir);
}

/// `LLB_CPU_VARIANT`: loads `libggml-cpu-<variant>.so` from `dir` when it is there and scores above
/// 0 on this CPU; false (with the reason in `module_errors`) otherwise.
#[cfg(llb_backend_dl)]
fn forced_variant(dir: &std::path::Path, variant: &str) -> bool {
    let file = format!("libggml-cpu-{variant}.so");
    let path = dir.join(&file);
    let refuse = |why: String| {
        MODULE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).push(format!("LLB_CPU_VARIANT={variant}: {why}"));
        false
    };
    if variant.contains('/') || !path.is_file() {
        let have: Vec<String> = module_files(dir)
            .iter()
            .filter_map(|f| f.strip_prefix("libggml-cpu-").and_then(|f| f.strip_suffix(".so")).map(String::from))
            .collect();
        return refuse(format!("no {file} (there are: {}); ggml chose instead", have.join(", ")));
    }
    let Ok(c) = std::ffi::CString::new(path.to_string_lossy().as_bytes()) else { return false };
    // SAFETY: dlopen of a ggml CPU module by path; its ggml_backend_score takes no arguments and
    // returns an int (ggml-backend-impl.h); the handle is closed before ggml opens the file itself.
    let score = unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            0
        } else {
            let f = libc::dlsym(h, c"ggml_backend_score".as_ptr());
            let s = if f.is_null() { 0 } else { std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> i32>(f)() };
            libc::dlclose(h);
            s
        }
    };
    if score <= 0 {
        return refuse(format!("{file} does not run on this CPU (its score is 0); ggml chose instead"));
    }
    load_module(&path)
}

/// `ggml_backend_load`: registers the backend in the module at `path`; false when it gives none.
#[cfg(llb_backend_dl)]
fn load_module(path: &std::path::Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.to_string_lossy().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path; ggml registers the module's backend for the process.
    !unsafe { crate::sys::ggml_backend_load(c.as_ptr()) }.is_null()
}

/// The file names of ggml's backend modules in `dir` (`libggml-cpu-*.so`, `libggml-cuda.so`, ...;
/// not ggml's own libggml.so and libggml-base.so).
#[cfg(llb_backend_dl)]
fn module_files(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with("libggml-") && f.ends_with(".so") && f != "libggml-base.so")
        .collect();
    files.sort();
    files
}

#[cfg(llb_backend_dl)]
fn has_cpu_module(dir: &std::path::Path) -> bool {
    module_files(dir).iter().any(|f| f.starts_with("libggml-cpu-"))
}

/// Why a backend module in the directory (libggml-cuda.so beside the CPU ones) gave no backend:
/// ggml's registry skips such a module silently, so it is opened again here to keep the
/// loader's message (a missing libcudart.so.12, no driver), which `llb_version` reports.
#[cfg(llb_backend_dl)]
static MODULE_ERRORS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[cfg(llb_backend_dl)]
fn record_module_errors(dir: &std::path::Path) {
    // SAFETY: registry names are NUL-terminated and live for the process.
    let registered: Vec<String> = unsafe {
        (0..crate::sys::ggml_backend_reg_count())
            .map(|i| crate::sys::ggml_backend_reg_name(crate::sys::ggml_backend_reg_get(i)))
            .filter(|n| !n.is_null())
            .map(|n| std::ffi::CStr::from_ptr(n).to_string_lossy().to_lowercase())
            .collect()
    };
    for file in module_files(dir) {
        let Some(name) = file.strip_prefix("libggml-").and_then(|f| f.strip_suffix(".so")) else { continue };
        if name.starts_with("cpu-") || registered.iter().any(|r| r == name) {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(dir.join(&file).to_string_lossy().as_bytes()) else { continue };
        // SAFETY: dlopen of a ggml backend module by path, closed again at once; dlerror's text is
        // copied before any other dl call on this thread.
        let why = unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if h.is_null() {
                let err = libc::dlerror();
                if err.is_null() {
                    "dlopen failed".to_string()
                } else {
                    std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned()
                }
            } else {
                libc::dlclose(h);
                "it loads but registered no backend (no device?)".to_string()
            }
        };
        MODULE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{file}: {why}"));
    }
}

/// The directory of the shared object this code is in (libllb.so; a test binary's own directory
/// when llb is linked statically into it).
#[cfg(llb_backend_dl)]
fn own_dir() -> Option<std::path::PathBuf> {
    // SAFETY: Dl_info is plain pointers, for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the address of a function of this object and fills `info`.
    let found = unsafe { libc::dladdr(own_dir as *const () as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the dynamic loader.
    let file = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = std::path::PathBuf::from(file.to_string_lossy().into_owned());
    path.parent().map(|p| p.to_path_buf())
}

/// The loaded `libggml-cpu-<variant>.so`, as (variant, path); None when none is loaded.
#[cfg(target_os = "linux")]
fn loaded_cpu_module() -> Option<(String, String)> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: the loader passes a valid info; data is the Option below, for this call only.
        let (info, found) = unsafe { (&*info, &mut *(data as *mut Option<(String, String)>)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: dlpi_name is a NUL-terminated path owned by the loader.
        let path = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned();
        let file = path.rsplit('/').next().unwrap_or("");
        if let Some(v) = file.strip_prefix("libggml-cpu-").and_then(|v| v.split(".so").next()) {
            *found = Some((v.to_string(), path.clone()));
            return 1;
        }
        0
    }
    let mut found: Option<(String, String)> = None;
    // SAFETY: visit only reads each entry and writes `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut libc::c_void) };
    found
}

#[cfg(not(target_os = "linux"))]
fn loaded_cpu_module() -> Option<(String, String)> {
    None
}

/// `llb_version`'s `cpu` and `platform`: the platform folder this library belongs in
/// (`linux-x86_64`, as the Java jar names it), whether its CPU kernels are chosen at run time, and
/// which were chosen (`haswell`, `sse42`, ...; `built-in` for a build with one set); in a
/// run-time-variant build also `module_errors`: the backend modules beside libllb that gave no
/// backend, and why.
pub fn report() -> (Value, String) {
    let runtime = cfg!(llb_backend_dl);
    let module = loaded_cpu_module();
    let cpu = json!({
        "runtime_variants": runtime,
        "variant": match (&module, runtime) {
            (Some((v, _)), _) => Value::String(v.clone()),
            (None, true) => Value::Null,
            (None, false) => Value::String("built-in".into()),
        },
        "module": module.map(|(_, p)| p),
    });
    #[cfg(llb_backend_dl)]
    let cpu = {
        let mut cpu = cpu;
        let errors = MODULE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        cpu["module_errors"] = json!(errors);
        cpu
    };
    (cpu, format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH))
}
