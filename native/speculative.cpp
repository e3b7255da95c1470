// Speculative decoding's drafters: llb_shim_spec_* over llama.cpp's common_speculative
// (common/speculative.h), the n-gram types and draft-simple (a smaller model of the same
// vocabulary). llb verifies the drafts itself (src/speculate/), on its own scheduler: this file
// only proposes tokens and keeps the drafters' state per lane. A draft model's context is made
// and owned by llb's scheduler (src/scheduler/drafting.rs, through the same guarded path and
// thread budget as every context); this file decodes in it: each lane's sequence there follows the
// lane's conversation (what the model accepted), caught up before each draft, and the lanes asked
// at once share llama.cpp's draft decodes (common_speculative_draft drafts every asking sequence
// in one batch per drafted position).

#include "shim.h"

#include "guard.h"

#include "common.h"
#include "llama-cpp.h"
#include "speculative.h"

#include <string>
#include <vector>

using namespace llb_shim;

struct llb_shim_spec {
    // draft-simple: the draft model's context (not owned: llb's scheduler made it and frees it
    // after the drafter), and per lane the tokens its sequence there holds.
    llama_context *           ctx_dft   = nullptr;
    int32_t                   n_max_dft = 0;
    std::vector<llama_tokens> in_dft;
    common_speculative_ptr spec;
    // Per lane: the conversation's tokens (the prompt, then what each ask appends; the drafter
    // reads them through a pointer), its result, and whether it ever drafted
    // (common_speculative_accept needs that).
    std::vector<llama_tokens> history;
    std::vector<llama_tokens> result;
    std::vector<bool>         drafted;
    // Per lane asked for a draft and not yet run: the most tokens asked (0: not asked), and the
    // conversation's last token, held apart while asked (common_speculative reads it apart).
    std::vector<int32_t>      asked;
    std::vector<llama_token>  last;
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
    llama_context * ctx = st.ctx_dft;
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
    llama_memory_seq_rm(llama_get_memory(st.ctx_dft), (llama_seq_id) lane, (llama_pos) held.size(), -1);
}

void init_lanes(llb_shim_spec & s, uint32_t n_seq) {
    s.history.resize(n_seq);
    s.result.resize(n_seq);
    s.drafted.assign(n_seq, false);
    s.in_dft.resize(n_seq);
    s.asked.assign(n_seq, 0);
    s.last.assign(n_seq, 0);
}

// A lane whose ask did not run to the end: its draft is dropped, its conversation whole again,
// and (draft-simple) its sequence in the draft context, whose content is not known, emptied.
void drop_ask(llb_shim_spec & st, uint32_t lane) {
    if (st.asked[lane] == 0) {
        return;
    }
    st.asked[lane] = 0;
    common_speculative_get_draft_params(st.spec.get(), (llama_seq_id) lane).drafting = false;
    st.result[lane].clear();
    if (st.ctx_dft) {
        llama_memory_seq_rm(llama_get_memory(st.ctx_dft), (llama_seq_id) lane, -1, -1);
        st.in_dft[lane].clear();
    }
    st.history[lane].push_back(st.last[lane]);
}

// Every asked lane's draft in one common_speculative_draft (draft-simple: one draft decode per
// drafted position for all of them), then each lane's conversation whole again.
void run_asks(llb_shim_spec & st) {
    bool any = false;
    for (int32_t a : st.asked) {
        any = any || a > 0;
    }
    if (!any) {
        return;
    }
    try {
        common_speculative_draft(st.spec.get());
    } catch (...) {
        for (uint32_t lane = 0; lane < st.asked.size(); lane++) {
            drop_ask(st, lane);
        }
        throw;
    }
    for (uint32_t lane = 0; lane < st.asked.size(); lane++) {
        if (st.asked[lane] == 0) {
            continue;
        }
        // A lane that drafted nothing is still marked drafting: it must not be drafted again
        // with these params by a later run.
        common_speculative_get_draft_params(st.spec.get(), (llama_seq_id) lane).drafting = false;
        llama_tokens & hist = st.history[lane];
        if (st.ctx_dft) {
            note_drafted(st, lane, hist, st.last[lane], st.result[lane], st.asked[lane]);
        }
        hist.push_back(st.last[lane]); // the result holds at most `asked` tokens: llama.cpp cut it to n_max
        if (!st.result[lane].empty()) {
            st.drafted[lane] = true;
        }
        st.asked[lane] = 0;
    }
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

llb_shim_status llb_shim_spec_new_draft(const llama_context * ctx_tgt, llama_context * ctx_dft, uint32_t n_seq,
                                        int32_t n_max, llb_shim_spec ** out, char ** err) {
    return guard(err, [&] {
        if (!ctx_tgt || !ctx_dft || !out || n_seq == 0 || n_max <= 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument, no lane or no draft");
        }
        *out = nullptr;
        auto s = std::make_unique<llb_shim_spec>();
        s->ctx_dft   = ctx_dft;
        s->n_max_dft = n_max;
        common_params_speculative params;
        params.types              = { COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE };
        params.draft.mparams.path = "(loaded by llb)"; // common_speculative_init wants a draft model named
        params.draft.ctx_tgt      = const_cast<llama_context *>(ctx_tgt);
        params.draft.ctx_dft      = ctx_dft;
        params.draft.n_max        = n_max;
        // A draft stops where the draft model is unsure (llama.cpp's --draft-p-min, 0.75 as its
        // default was before b9371 made it 0): each drafted token costs a step of the draft model,
        // and an unsure one is seldom accepted.
        params.draft.p_min        = 0.75f;
        try {
            s->spec.reset(common_speculative_init(params, n_seq));
        } catch (const std::runtime_error & e) {
            // llama.cpp's own checks: the draft model's vocabulary must be the target's, its
            // context must have a sequence per lane.
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
        drop_ask(st, lane);
        st.history[lane].assign(prompt, prompt + n_prompt);
        st.drafted[lane] = false;
        common_speculative_begin(st.spec.get(), (llama_seq_id) lane, st.history[lane]);
    });
}

llb_shim_status llb_shim_spec_ask(llb_shim_spec * s, uint32_t lane, const int32_t * tokens, size_t n_tokens,
                                  int32_t n_max, char ** err) {
    return guard(err, [&] {
        llb_shim_spec & st = checked(s, lane);
        if ((!tokens && n_tokens > 0) || n_max <= 0) {
            throw shim_error(LLB_SHIM_INVALID, "NULL tokens or no room for a draft");
        }
        drop_ask(st, lane); // an ask never run (its run failed before reaching it) is replaced
        st.result[lane].clear();
        llama_tokens & hist = st.history[lane];
        hist.insert(hist.end(), tokens, tokens + n_tokens);
        if (hist.empty()) {
            return; // nothing to follow: no draft
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
        st.last[lane]  = last;
        st.asked[lane] = n_max;
        common_speculative_get_draft_params(st.spec.get(), (llama_seq_id) lane) = {
            /* .drafting = */ true,
            /* .n_max    = */ n_max,
            /* .n_past   = */ (llama_pos) hist.size(),
            /* .id_last  = */ last,
            /* .prompt   = */ &hist,
            /* .result   = */ &st.result[lane],
        };
    });
}

llb_shim_status llb_shim_spec_run(llb_shim_spec * s, int32_t n_threads, char ** err) {
    return guard(err, [&] {
        if (!s || !s->spec) {
            throw shim_error(LLB_SHIM_INVALID, "NULL speculative state");
        }
        if (s->ctx_dft && n_threads > 0) {
            llama_set_n_threads(s->ctx_dft, n_threads, n_threads);
        }
        run_asks(*s);
    });
}

llb_shim_status llb_shim_spec_take(llb_shim_spec * s, uint32_t lane, int32_t * out, size_t cap, size_t * n_out,
                                   char ** err) {
    return guard(err, [&] {
        llb_shim_spec & st = checked(s, lane);
        if (!out || !n_out) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        const llama_tokens & result = st.result[lane];
        const size_t n = std::min(result.size(), cap);
        std::copy(result.begin(), result.begin() + n, out);
        *n_out = n;
        st.result[lane].clear();
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
