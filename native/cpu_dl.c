/*
 * ggml-cpu's thread-pool entry points for a build whose CPU backend is a module chosen at run time
 * (LLB_CPU_VARIANTS=1, build.rs build_llama_dl; docs/release.md).
 *
 * In the default build ggml-cpu is linked into libllb and src/threads.rs calls
 * ggml_threadpool_new/free directly. With GGML_BACKEND_DL the CPU backend is one of several
 * libggml-cpu-<variant>.so modules and libllb cannot link against any of them; these definitions
 * forward to the loaded module through ggml's registry, as llama.cpp's own tools do
 * (ggml_backend_reg_get_proc_address on the "CPU" registry).
 */
#include <stddef.h>

#include "ggml-backend.h"
#include "ggml.h"

typedef struct ggml_threadpool *(*threadpool_new_fn)(struct ggml_threadpool_params *);
typedef void (*threadpool_free_fn)(struct ggml_threadpool *);

static void *cpu_proc(const char *name) {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    return reg ? ggml_backend_reg_get_proc_address(reg, name) : NULL;
}

/* NULL when no CPU module is loaded (the caller treats NULL as "no pool": ggml's own threads). */
struct ggml_threadpool *ggml_threadpool_new(struct ggml_threadpool_params *params) {
    threadpool_new_fn f = (threadpool_new_fn)cpu_proc("ggml_threadpool_new");
    return f ? f(params) : NULL;
}

void ggml_threadpool_free(struct ggml_threadpool *threadpool) {
    threadpool_free_fn f = (threadpool_free_fn)cpu_proc("ggml_threadpool_free");
    if (f && threadpool) f(threadpool);
}
