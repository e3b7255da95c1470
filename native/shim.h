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
struct llama_context;

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
    LLB_SHIM_INTERNAL = 5,
    /* The model's output does not parse with the template's parser. */
    LLB_SHIM_PARSE = 6
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
 * Test-only fault injection (src/fault.rs): the next shim call on this thread throws a C++
 * exception inside its guard (reported as LLB_SHIM_INTERNAL); _clear disarms.
 */
void llb_shim_testing_throw_next(void);
void llb_shim_testing_clear(void);

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

/*
 * Renders the templates (plain Jinja, no parser generation) with a one-message conversation
 * (failure: LLB_SHIM_TEMPLATE) and with a whole tool round trip, whose exceptions are ignored:
 * run in the isolated probe's child so that a template that crashes, hangs or blows up on an
 * ordinary conversation is caught there.
 */
llb_shim_status llb_shim_templates_exercise(const llb_shim_templates *t, char **err);

/*
 * The caps probe of llb_shim_templates_probe on templates built as llb_shim_templates_from_strings
 * does, run in a fork()ed child process (native/isolate.cpp): a hostile template that recurses
 * without end, loops, or allocates without bound ends the child, not the host. The child also
 * runs llb_shim_templates_exercise. Bounds: `timeout_ms` of wall-clock time, `mem_limit_mb`
 * of address space beyond the host's current size (0: no memory bound), an 8 MiB stack.
 * A template that exceeds them, crashes the child or fails to parse is LLB_SHIM_TEMPLATE;
 * fork/pipe failures are LLB_SHIM_INTERNAL. *out_json as llb_shim_templates_probe.
 */
llb_shim_status llb_shim_probe_isolated(const char *default_src, const char *tool_use_src, const char *bos_text,
                                        const char *eos_text, int32_t add_bos, int32_t add_eos,
                                        uint32_t timeout_ms, uint32_t mem_limit_mb, char **out_json, char **err);

/*
 * common_chat_templates_apply. `inputs_json`:
 *   {"messages":[OpenAI messages], "tools":[OpenAI tools]|null, "tool_choice":"auto"|"none"|"required",
 *    "parallel_tool_calls":bool, "reasoning_format":"none"|"auto", "enable_thinking":bool,
 *    "chat_template_kwargs":{k:any}, "json_schema":{...}|null, "add_generation_prompt":bool}
 * *out_json: {"prompt","format","format_name","grammar","grammar_lazy",
 *   "grammar_triggers":[{"type":0..3,"value":"..."}],"preserved_tokens":[...],"additional_stops":[...],
 *   "generation_prompt","parser","supports_thinking","thinking_start_tag","thinking_end_tag"}
 * Template exceptions come back as LLB_SHIM_TEMPLATE, bad inputs as LLB_SHIM_INVALID.
 */
llb_shim_status llb_shim_templates_apply(const llb_shim_templates *t, const char *inputs_json,
                                         char **out_json, char **err);

/* An output parser for one request (from the apply result). */
typedef struct llb_shim_parser llb_shim_parser;

/*
 * Builds the parser: `format` and `parser` (serialized PEG arena, may be empty) and
 * `generation_prompt` from the apply result; `reasoning_format` "none"|"auto";
 * `parse_tool_calls` 0/1.
 */
llb_shim_status llb_shim_parser_new(int32_t format, const char *parser, const char *generation_prompt,
                                    const char *reasoning_format, int32_t parse_tool_calls,
                                    llb_shim_parser **out, char **err);

/* Accepts NULL. */
void llb_shim_parser_free(llb_shim_parser *p);

/*
 * common_chat_parse of `text` (`len` bytes). `is_partial` != 0 while streaming.
 * *out_json: {"content":"...","reasoning_content":"...","tool_calls":[{"name","arguments","id"}]}
 * A text that does not parse is LLB_SHIM_PARSE with the parser's message.
 */
llb_shim_status llb_shim_parser_parse(const llb_shim_parser *p, const char *text, size_t len, int32_t is_partial,
                                      char **out_json, char **err);

/*
 * The grammar of the tool-call section alone: the `required` parser arena's grammar built in lazy
 * mode, whose root is the union of its trigger rules (each starts at the tool-call marker).
 * Used non-lazily it makes a reply start with the tool call. `tools_json` is the request's tools
 * (their schemas' $refs are resolved as llama.cpp does). *out_grammar is "" when the arena has no
 * trigger rule.
 */
llb_shim_status llb_shim_tool_section_grammar(const char *parser, const char *tools_json, char **out_grammar,
                                              char **err);

struct llama_vocab;
struct llama_sampler;
struct llama_token_data_array;

/*
 * Grammar samplers, with llama.cpp's exceptions caught. `lazy` != 0 uses the trigger patterns
 * (regexes) and tokens; otherwise they are ignored.
 */
llb_shim_status llb_shim_grammar_new(const struct llama_vocab *vocab, const char *grammar, int32_t lazy,
                                     const char **patterns, size_t n_patterns, const int32_t *tokens,
                                     size_t n_tokens, struct llama_sampler **out, char **err);

/* llama_sampler_accept / llama_sampler_apply, exceptions caught (a rejected token throws). */
llb_shim_status llb_shim_sampler_accept(struct llama_sampler *s, int32_t token, char **err);
llb_shim_status llb_shim_sampler_apply(struct llama_sampler *s, struct llama_token_data_array *cur, char **err);

/*
 * The text the grammar sampler `s` (from llb_shim_grammar_new) forces next: while every grammar
 * stack expects the same single character, that character, up to `max_bytes` bytes (whole
 * characters). *out_text is "" when the grammar has a choice or may end here, a lazy grammar
 * still waits for its trigger, or the last token ended mid-character. The grammar is unchanged.
 * *out_text is owned by the caller (llb_shim_string_free).
 */
llb_shim_status llb_shim_grammar_forced(struct llama_sampler *s, size_t max_bytes, char **out_text, char **err);

/*
 * A lazy grammar's trigger patterns, compiled once (std::regex, as llama.cpp's lazy grammar does).
 * llb_shim_triggers_find reports where the constrained text starts in `text` (the first
 * non-empty capture group of the first pattern that matches, else the match; a pattern written
 * `^...$` must match the whole text), exactly as llama.cpp's llama_grammar_trigger_pattern::find
 * at the pin: *out_start is -1 when no pattern matches. A pattern std::regex refuses is
 * LLB_SHIM_INVALID. Free with llb_shim_triggers_free (NULL is ignored).
 */
typedef struct llb_shim_triggers llb_shim_triggers;
llb_shim_status llb_shim_triggers_new(const char **patterns, size_t n_patterns, llb_shim_triggers **out,
                                      char **err);
llb_shim_status llb_shim_triggers_find(const llb_shim_triggers *t, const char *text, size_t len,
                                       int64_t *out_start, char **err);
void llb_shim_triggers_free(llb_shim_triggers *t);

/*
 * Self-drafting speculative decoding on llama.cpp's common_speculative (common/speculative.h),
 * for the n-gram types (`ngram-simple`, `ngram-map-k`, `ngram-map-k4v`, `ngram-mod`,
 * `ngram-cache`: llama.cpp's names). One llb_shim_spec drafts for `n_seq` lanes (a lane is one
 * request at a time); its calls must not overlap (the caller locks). A type that needs a draft
 * model, or an unknown one, is LLB_SHIM_INVALID. `ngram_size` is the length of the n-gram looked up
 * (llama-server's --spec-ngram-*-size-n, --spec-ngram-mod-n-match); 0 keeps llama.cpp's default.
 *
 * _begin starts a lane's generation on its prompt (the lane keeps its tokens). A draft takes three
 * calls: _ask appends `tokens` (the reply's tokens since the lane's last ask) and asks for at most
 * `n_max` tokens to follow the last one (nothing is asked when the lane has no token yet); _run
 * drafts for every lane asked since the last run at once (draft-simple: the lanes share each
 * draft decode, on `n_threads` threads; 0 leaves the context's count); _take writes the lane's
 * draft to `out` (at most `cap` tokens, *n_out of them; 0 when nothing could be drafted). When
 * _run fails, every lane it was drafting for starts its next ask afresh. _accept reports how many
 * tokens of the lane's last non-empty draft the model accepted (ignored when the lane drafted
 * nothing yet).
 * Free with llb_shim_spec_free (NULL is ignored).
 */
typedef struct llb_shim_spec llb_shim_spec;
llb_shim_status llb_shim_spec_new(const char *type, uint32_t n_seq, uint16_t ngram_size, llb_shim_spec **out,
                                  char **err);
/*
 * draft-simple: drafts with the model of `ctx_dft`, a model of the target's vocabulary (llama.cpp's
 * check, common_speculative_are_compatible; another vocabulary is LLB_SHIM_INVALID), in that
 * context, made by the caller with one sequence per lane (n_seq) and owned by it: the shim keeps
 * each lane's sequence there in step with the lane's conversation. `ctx_tgt` is the target's
 * context, read for its model only, during this call. Drafts hold at most `n_max` tokens. The
 * context and both models must outlive the drafter.
 */
llb_shim_status llb_shim_spec_new_draft(const struct llama_context *ctx_tgt, struct llama_context *ctx_dft,
                                        uint32_t n_seq, int32_t n_max, llb_shim_spec **out, char **err);
llb_shim_status llb_shim_spec_begin(llb_shim_spec *s, uint32_t lane, const int32_t *prompt, size_t n_prompt,
                                    char **err);
llb_shim_status llb_shim_spec_ask(llb_shim_spec *s, uint32_t lane, const int32_t *tokens, size_t n_tokens,
                                  int32_t n_max, char **err);
llb_shim_status llb_shim_spec_run(llb_shim_spec *s, int32_t n_threads, char **err);
llb_shim_status llb_shim_spec_take(llb_shim_spec *s, uint32_t lane, int32_t *out, size_t cap, size_t *n_out,
                                   char **err);
llb_shim_status llb_shim_spec_accept(llb_shim_spec *s, uint32_t lane, uint16_t n_accepted, char **err);
void llb_shim_spec_free(llb_shim_spec *s);

/*
 * Reference kernels on the context's CPU backend (ggml_backend_cpu_set_use_ref): flash attention
 * takes its one-row-at-a-time path for every batch shape and thread count (no split-KV chunks by
 * thread count, no tiles), so a token's logits do not depend on the batch it was in, on how many
 * threads ran it, or on whether its prefix was read as a prompt or restored. Returns how many CPU
 * backends took the setting (0: the context computes on no CPU backend, or that ggml lacks it).
 */
int32_t llb_shim_context_reference_kernels(struct llama_context *ctx, int32_t on);

/*
 * A sequence's state out of a context (llb_shim_state_seq_get: the bytes of
 * llama_state_seq_get_data_ext with flags 0) and back in (llb_shim_state_seq_set: as
 * llama_state_seq_set_data_ext, which empties `seq` first), with the tensor copies grouped
 * (native/state.cpp): the pieces of one K or V tensor that lie in a span not much longer than
 * they are cross as one copy of the span (two going in: read, patched, written back). `mode`: 0
 * copies each piece as llama.cpp does; 1 groups on buffers that are not host memory (a GPU's);
 * 2 groups on every buffer (tests run the device path on the CPU). `copies` and `pieces` (each
 * may be NULL) receive the tensor copies made and the pieces moved. Returns the state's size in
 * bytes, 0 when llama.cpp refuses or fails (never throws).
 */
size_t llb_shim_state_seq_get(struct llama_context *ctx, int32_t seq, uint8_t *dst, size_t size, int32_t mode,
                              size_t *copies, size_t *pieces);
size_t llb_shim_state_seq_set(struct llama_context *ctx, int32_t seq, const uint8_t *src, size_t size,
                              int32_t mode, size_t *copies, size_t *pieces);

#ifdef __cplusplus
}
#endif

#endif /* LLB_SHIM_H */
