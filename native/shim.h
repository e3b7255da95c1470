/*
 * llb shim: a C interface over llama.cpp's C++ chat stack (common/chat.h).
 *
 * Internal to llb: Rust calls it through bindgen; hosts never see it.
 *
 * Conventions:
 *  - Every function returns an llb_shim_status. On failure, *err (when err is non-NULL) receives a
 *    message the caller releases with llb_shim_string_free.
 *  - No C++ exception ever leaves these functions: each catches (...) and reports
 *    LLB_SHIM_INTERNAL or a more precise status.
 *  - Strings passed in are borrowed for the duration of the call. Strings returned through out
 *    parameters are owned by the caller (llb_shim_string_free).
 *  - Structured data crosses as JSON text (nlohmann on this side, serde on the other).
 */
#ifndef LLB_SHIM_H
#define LLB_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct llama_model;

typedef enum llb_shim_status {
    LLB_SHIM_OK = 0,
    /* The file could not be opened or read. */
    LLB_SHIM_IO = 1,
    /* The file is not a well-formed GGUF (bad magic, truncated, corrupt lengths). */
    LLB_SHIM_NOT_GGUF = 2,
    /* A chat template failed to parse or render. */
    LLB_SHIM_TEMPLATE = 3,
    /* A request handed to the shim was malformed. */
    LLB_SHIM_INVALID = 4,
    /* Anything else (an unexpected exception, allocation failure). */
    LLB_SHIM_INTERNAL = 5
} llb_shim_status;

/* Chat templates of one model: the default template and the optional `tool_use` variant. */
typedef struct llb_shim_templates llb_shim_templates;

/*
 * Routes llama.cpp's logs (llama_log_set and common's LOG_*): verbose != 0 prints them to stderr,
 * 0 drops them. A library must not write to its host's stderr unasked.
 */
void llb_shim_set_logging(int32_t verbose);

/* Releases a string returned by the shim. Accepts NULL. */
void llb_shim_string_free(char *s);

/*
 * Builds templates the way common_chat_templates_init(model, "") does, from strings read from the
 * header: `default_src` and `tool_use_src` may be NULL (absent). bos/eos are the token texts.
 */
llb_shim_status llb_shim_templates_from_strings(const char *default_src, const char *tool_use_src,
                                                const char *bos_text, const char *eos_text,
                                                int32_t add_bos, int32_t add_eos,
                                                llb_shim_templates **out, char **err);

/* Builds templates with common_chat_templates_init(model, ""). `model` is borrowed. */
llb_shim_status llb_shim_templates_from_model(const struct llama_model *model,
                                              llb_shim_templates **out, char **err);

/* Accepts NULL. */
void llb_shim_templates_free(llb_shim_templates *t);

/*
 * The caps probe. *out_json: {"caps":{...llama.cpp's caps map...},
 *   "caps_source":"tool_use"|"default"|"chatml_fallback", "has_tool_use_template":bool,
 *   "chat_template":"<source the caps came from>", "chat_format":"..."|null,
 *   "tool_parser_error":"..."|null, "bos_token":"...", "eos_token":"..."}
 * caps come from the tool_use variant when present, else from the default template.
 * chat_format comes from applying the templates to a one-tool probe request.
 */
llb_shim_status llb_shim_templates_probe(const llb_shim_templates *t, char **out_json, char **err);

#ifdef __cplusplus
}
#endif

#endif /* LLB_SHIM_H */
