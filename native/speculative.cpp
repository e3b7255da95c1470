// Speculative decoding's drafters: llb_shim_spec_* over llama.cpp's common_speculative
// (common/speculative.h), the n-gram types and draft-simple (a smaller model of the same
// vocabulary). llb verifies the drafts itself (src/speculate/), on its own scheduler: this file
// only proposes tokens and keeps the drafters' state per lane. A draft model's context is this
// file's own: each lane's sequence there follows the lane's conversation (what the model
// accepted), caught up before each draft.

#include "shim.h"

#include "guard.h"

#include "common.h"
#include "ggml-cpu.h"
#include "llama-cpp.h"
#include "speculative.h"

#include <string>
#include <vector>

using namespace llb_shim;

struct threadpool_deleter {
    void operator()(ggml_threadpool * t) { ggml_threadpool_free(t); }
};

struct llb_shim_spec {
    // draft-simple: the draft context's compute threads (kept, not made for every graph), the
    // context (declared after its threads and before `spec`, which refers to it: freed after
    // `spec` and before the threads), and per lane the tokens its sequence there holds.
    std::unique_ptr<ggml_threadpool, threadpool_deleter> threads_dft;
    llama_context_ptr         ctx_dft;
    int32_t                   n_max_dft = 0;
    std::vector<llama_tokens> in_dft;
    common_speculative_ptr spec;
    // Per lane: the conversation's tokens (the prompt, then what each draft call appends; the
    // drafter reads them through a pointer), its result, and whether it ever drafted
    // (common_speculative_accept needs that).
    std::vector<llama_tokens> history;
    std::vector<llama_tokens> result;
    std::vector<bool>         drafted;
};

namespace {

// The n-gram types: they read the token history only (no draft model, no context).
bool self_drafting(common_speculative_type t) {
    switch (t) {
        case COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MOD:
        case COMMON_SPECULATIVE_TYPE_NGRAM_CACHE:
            return true;
        default:
            return false;
    }
}

llb_shim_spec & checked(llb_shim_spec * s, uint32_t lane) {
    if (!s || !s->spec) {
        throw shim_error(LLB_SHIM_INVALID, "NULL speculative state");
    }
    if (lane >= s->history.size()) {
        throw shim_error(LLB_SHIM_INVALID, "lane " + std::to_string(lane) + " out of range");
    }
    return *s;
}

void decode_or_throw(llama_context * ctx, llama_batch & batch) {
    if (llama_decode(ctx, batch) != 0) {
        throw shim_error(LLB_SHIM_INTERNAL, "the draft model could not decode (its context is full?)");
    }
}

// Decodes tokens[from..] into the draft context's sequence `lane`, at their positions.
void decode_from(llama_context * ctx, uint32_t lane, const llama_tokens & tokens, size_t from) {
    const int32_t n_batch = (int32_t) llama_n_batch(ctx);
    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    try {
        for (size_t i = from; i < tokens.size();) {
            common_batch_clear(batch);
            for (; i < tokens.size() && batch.n_tokens < n_batch; i++) {
                common_batch_add(batch, tokens[i], (llama_pos) i, { (llama_seq_id) lane }, false);
            }
            decode_or_throw(ctx, batch);
        }
    } catch (...) {
        llama_batch_free(batch);
        throw;
    }
    llama_batch_free(batch);
}

// draft-simple: makes the draft context's sequence `lane` hold `tokens`, keeping the prefix it
// already holds. When the context is full, the other lanes' sequences make room.
void catch_up(llb_shim_spec & st, uint32_t lane, const llama_tokens & tokens) {
    llama_context * ctx = st.ctx_dft.get();
    llama_memory_t mem = llama_get_memory(ctx);
    llama_tokens & held = st.in_dft[lane];
    size_t keep = 0;
    while (keep < held.size() && keep < tokens.size() && held[keep] == tokens[keep]) {
        keep++;
    }
    llama_memory_seq_rm(mem, (llama_seq_id) lane, (llama_pos) keep, -1);
    held.resize(keep);
    try {
        decode_from(ctx, lane, tokens, keep);
    } catch (const shim_error &) {
        for (uint32_t other = 0; other < st.in_dft.size(); other++) {
            if (other != lane) {
                llama_memory_seq_rm(mem, (llama_seq_id) other, -1, -1);
                st.in_dft[other].clear();
            }
        }
        llama_memory_seq_rm(mem, (llama_seq_id) lane, (llama_pos) keep, -1);
        decode_from(ctx, lane, tokens, keep);
    }
    held = tokens;
}

// After a draft-simple draft of `lane`, whose conversation is `hist` then `last`: what the draft
// context's sequence holds. llama.cpp's drafter decoded `last` and each drafted token it went on
// from, that is all of `result` but the last token when the draft stopped at its size limit
// `n_max`; the next catch_up keeps those the model accepted.
void note_drafted(llb_shim_spec & st, uint32_t lane, const llama_tokens & hist, llama_token last,
                  const llama_tokens & result, int32_t n_max) {
    const int32_t limit = std::min(n_max, st.n_max_dft);
    size_t decoded = result.size();
    if (decoded > 0 && (int32_t) decoded >= limit) {
        decoded--;
    }
    llama_tokens & held = st.in_dft[lane];
    held = hist;
    if (!result.empty()) { // else the decode of `last` may have failed: it comes back with the next catch_up
        held.push_back(last);
        held.insert(held.end(), result.begin(), result.begin() + decoded);
    }
    llama_memory_seq_rm(llama_get_memory(st.ctx_dft.get()), (llama_seq_id) lane, (llama_pos) held.size(), -1);
}

void init_lanes(llb_shim_spec & s, uint32_t n_seq) {
    s.history.resize(n_seq);
    s.result.resize(n_seq);
    s.drafted.assign(n_seq, false);
    s.in_dft.resize(n_seq);
}

} // namespace

extern "C" {

llb_shim_status llb_shim_spec_new(const char * type, uint32_t n_seq, uint16_t ngram_size, llb_shim_spec ** out,
                                  char ** err) {
    return guard(err, [&] {
        if (!type || !out || n_seq == 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument or no lane");
        }
        *out = nullptr;
        const common_speculative_type t = common_speculative_type_from_name(type);
        if (!self_drafting(t)) {
            throw shim_error(LLB_SHIM_INVALID, std::string("not a self-drafting speculative type: ") + type);
        }
        common_params_speculative params;
        params.types = { t };
        if (ngram_size > 0) {
            params.ngram_simple.size_n  = ngram_size;
            params.ngram_map_k.size_n   = ngram_size;
            params.ngram_map_k4v.size_n = ngram_size;
            params.ngram_mod.n_match    = ngram_size;
        }
        auto * s = new llb_shim_spec();
        s->spec.reset(common_speculative_init(params, n_seq));
        if (!s->spec) {
            delete s;
            throw shim_error(LLB_SHIM_INTERNAL, std::string("common_speculative_init refused ") + type);
        }
        init_lanes(*s, n_seq);
        *out = s;
    });
}

llb_shim_status llb_shim_spec_new_draft(const llama_context * ctx_tgt, const llama_model * draft, uint32_t n_ctx,
                                        uint32_t n_batch, int32_t n_threads, uint32_t n_seq, int32_t n_max,
                                        llb_shim_spec ** out, char ** err) {
    return guard(err, [&] {
        if (!ctx_tgt || !draft || !out || n_seq == 0 || n_max <= 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument, no lane or no draft");
        }
        *out = nullptr;
        auto s = std::make_unique<llb_shim_spec>();
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx           = n_ctx;
        cp.n_batch         = n_batch;
        cp.n_ubatch        = std::min<uint32_t>(n_batch, 512);
        cp.n_seq_max       = n_seq;
        cp.kv_unified      = true;
        cp.n_threads       = n_threads;
        cp.n_threads_batch = n_threads;
        cp.no_perf         = true;
        s->ctx_dft.reset(llama_init_from_model(const_cast<llama_model *>(draft), cp));
        if (!s->ctx_dft) {
            throw shim_error(LLB_SHIM_INTERNAL, "llama.cpp could not create the draft model's context");
        }
        ggml_threadpool_params tp = ggml_threadpool_params_default(std::max(1, n_threads));
        tp.poll = 0; // idle threads sleep at once: the target's decode needs the cores between drafts
        s->threads_dft.reset(ggml_threadpool_new(&tp));
        if (s->threads_dft) {
            llama_attach_threadpool(s->ctx_dft.get(), s->threads_dft.get(), s->threads_dft.get());
        }
        s->n_max_dft = n_max;
        common_params_speculative params;
        params.types              = { COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE };
        params.draft.mparams.path = "(loaded by llb)"; // common_speculative_init wants a draft model named
        params.draft.ctx_tgt      = const_cast<llama_context *>(ctx_tgt);
        params.draft.ctx_dft      = s->ctx_dft.get();
        params.draft.n_max        = n_max;
        // A draft stops where the draft model is unsure (llama.cpp's --draft-p-min, 0.75 as its
        // default was before b9371 made it 0): each drafted token costs a step of the draft model,
        // and an unsure one is seldom accepted.
        params.draft.p_min        = 0.75f;
        try {
            s->spec.reset(common_speculative_init(params, n_seq));
        } catch (const std::runtime_error & e) {
            // llama.cpp's own check: the draft model's vocabulary must be the target's.
            throw shim_error(LLB_SHIM_INVALID, std::string("the draft model cannot draft for this model: ") + e.what());
        }
        if (!s->spec) {
            throw shim_error(LLB_SHIM_INTERNAL, "common_speculative_init refused draft-simple");
        }
        init_lanes(*s, n_seq);
        *out = s.release();
    });
}

llb_shim_status llb_shim_spec_begin(llb_shim_spec * s, uint32_t lane, const int32_t * prompt, size_t n_prompt,
                                    char ** err) {
    return guard(err, [&] {
        llb_shim_spec & st = checked(s, lane);
        if (!prompt && n_prompt > 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL prompt");
        }
        st.history[lane].assign(prompt, prompt + n_prompt);
        st.drafted[lane] = false;
        common_speculative_begin(st.spec.get(), (llama_seq_id) lane, st.history[lane]);
    });
}

llb_shim_status llb_shim_spec_draft(llb_shim_spec * s, uint32_t lane, const int32_t * tokens, size_t n_tokens,
                                    int32_t n_max, int32_t * out, size_t * n_out, char ** err) {
    return guard(err, [&] {
        llb_shim_spec & st = checked(s, lane);
        if ((!tokens && n_tokens > 0) || !out || !n_out || n_max <= 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument or no room for a draft");
        }
        *n_out = 0;
        llama_tokens & hist = st.history[lane];
        hist.insert(hist.end(), tokens, tokens + n_tokens);
        if (hist.empty()) {
            return;
        }
        // common_speculative reads the tokens before the last one, and the last one apart.
        const llama_token last = hist.back();
        hist.pop_back();
        if (st.ctx_dft) {
            try {
                catch_up(st, lane, hist);
            } catch (...) {
                hist.push_back(last);
                throw;
            }
        }
        llama_tokens & result = st.result[lane];
        result.clear();
        common_speculative_get_draft_params(st.spec.get(), (llama_seq_id) lane) = {
            /* .drafting = */ true,
            /* .n_max    = */ n_max,
            /* .n_past   = */ (llama_pos) hist.size(),
            /* .id_last  = */ last,
            /* .prompt   = */ &hist,
            /* .result   = */ &result,
        };
        try {
            common_speculative_draft(st.spec.get());
        } catch (...) {
            if (st.ctx_dft) { // what the draft context holds is not known: the lane starts over
                llama_memory_seq_rm(llama_get_memory(st.ctx_dft.get()), (llama_seq_id) lane, -1, -1);
                st.in_dft[lane].clear();
            }
            hist.push_back(last);
            throw;
        }
        if (st.ctx_dft) {
            note_drafted(st, lane, hist, last, result, n_max);
        }
        hist.push_back(last);
        const size_t n = std::min(result.size(), (size_t) n_max);
        std::copy(result.begin(), result.begin() + n, out);
        *n_out = n;
        if (n > 0) {
            st.drafted[lane] = true;
        }
    });
}

llb_shim_status llb_shim_spec_accept(llb_shim_spec * s, uint32_t lane, uint16_t n_accepted, char ** err) {
    return guard(err, [&] {
        llb_shim_spec & st = checked(s, lane);
        if (st.drafted[lane]) {
            common_speculative_accept(st.spec.get(), (llama_seq_id) lane, n_accepted);
        }
    });
}

void llb_shim_spec_free(llb_shim_spec * s) {
    delete s;
}

} // extern "C"
