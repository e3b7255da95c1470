// Self-drafting speculative decoding: llb_shim_spec_* over llama.cpp's common_speculative
// (common/speculative.h), the n-gram types only. llb verifies the drafts itself (src/speculate/),
// on its own scheduler: this file only proposes tokens and keeps the drafters' state per lane.

#include "shim.h"

#include "guard.h"

#include "speculative.h"

#include <string>
#include <vector>

using namespace llb_shim;

struct llb_shim_spec {
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
        s->history.resize(n_seq);
        s->result.resize(n_seq);
        s->drafted.assign(n_seq, false);
        *out = s;
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
            hist.push_back(last);
            throw;
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
