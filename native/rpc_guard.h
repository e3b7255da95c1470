/*
 * llb's guarded llama.cpp calls (native/rpc_guard.cpp): during them, ggml's abort on a lost RPC
 * server becomes an error return instead of the end of the process. src/backend.rs is their one
 * caller; tests/bindings.rs generates their Rust declarations (src/sys/bindings.rs) from here.
 *
 * Threads: each may run on any thread; the guard is per thread.
 */
#ifndef LLB_RPC_GUARD_H
#define LLB_RPC_GUARD_H

#include "llama.h"
#include "ggml-backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the abort callback and the dead-peer timeout (seconds; <= 0 keeps the default). Once
 * per process, before any RPC socket exists; later calls do nothing. */
void llb_rpc_guard_install(int peer_timeout_seconds);

/* llama_decode; INT32_MIN with the message in `err` (err_len bytes, NUL-terminated) when ggml
 * aborted (a lost RPC server). */
int32_t llb_guarded_decode(struct llama_context * ctx, struct llama_batch batch, char * err, size_t err_len);

/* llama_model_load_from_file; NULL when it fails or ggml aborted. */
struct llama_model * llb_guarded_model_load(const char * path, struct llama_model_params params);

/* llama_init_from_model; NULL with the message in `err` when ggml aborted, NULL with `err`
 * untouched when llama.cpp refused the params. */
struct llama_context * llb_guarded_init_context(struct llama_model * model, struct llama_context_params params,
                                                char * err, size_t err_len);

/* ggml_backend_rpc_add_server, passed as `add` (the RPC registry's proc address), with the
 * handshake bounded in time: NULL with the message in `err` when it fails. */
ggml_backend_reg_t llb_guarded_rpc_add(ggml_backend_reg_t (*add)(const char * endpoint), const char * endpoint,
                                       char * err, size_t err_len);

/* ggml_backend_dev_memory; false, with 0 and 0, when ggml aborted (an RPC device whose server is
 * gone). */
bool llb_guarded_dev_memory(ggml_backend_dev_t dev, size_t * free, size_t * total);

#ifdef __cplusplus
}
#endif

#endif /* LLB_RPC_GUARD_H */
