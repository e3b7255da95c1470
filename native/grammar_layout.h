// The definition of `struct llama_sampler_grammar`, copied token for token from the pinned
// src/llama-sampler.cpp, where it is private (see chat_templates_layout.h for why a
// token-identical copy is sound). build.rs refuses to build when the pinned definition differs.
//
// Why llb needs it: jump-forward decoding reads the grammar sampler's stacks to find the text the
// grammar forces next (llb_shim_grammar_forced); llama.h exposes no accessor for them.
#pragma once

#include "llama.h"

#include <string>

struct llama_grammar;

struct llama_sampler_grammar {
    const struct llama_vocab * vocab;

    std::string grammar_str;
    std::string grammar_root;

    struct llama_grammar * grammar;
};
