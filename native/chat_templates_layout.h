// The definition of `struct common_chat_templates`, copied token for token from the pinned
// common/chat.cpp, where it is private. C++'s one-definition rule allows a class to be defined in
// several translation units when the definitions are token-identical; build.rs refuses to build
// when the pinned chat.cpp's definition differs from this one, so the copy cannot drift.
//
// Why llb needs it: at the pin, common_chat_templates_get_caps() reads only the default template
// and common_chat_templates_init() can only take a `tool_use` variant from a loaded model. Reading
// caps from the `tool_use` variant, and building both variants from a GGUF header without loading
// the model, both need the two members.
#pragma once

#include "chat.h"

#include <memory>

struct common_chat_templates {
    bool add_bos;
    bool add_eos;
    bool has_explicit_template;
    std::unique_ptr<common_chat_template> template_default;
    std::unique_ptr<common_chat_template> template_tool_use;
};
