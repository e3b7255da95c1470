// llb shim over llama.cpp's chat stack. See shim.h for the conventions.
//
// Every extern "C" function body runs inside guard(), which turns any C++ exception into a status
// and a message: nothing thrown by llama.cpp's Jinja engine, parser or nlohmann crosses into Rust.

#include "shim.h"

#include "chat_templates_layout.h"
#include "grammar_layout.h"
#include "guard.h"

#include "chat.h"
#include "chat-auto-parser.h"
#include "json-schema-to-grammar.h"
#include "log.h"
#include "peg-parser.h"
#include "ggml.h"
#include "llama.h"
#include "llama-grammar.h"
#include "llama-context.h"
#include "ggml-backend.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <regex>
#include <mutex>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

using ojson = nlohmann::ordered_json;

struct llb_shim_templates {
    common_chat_templates_ptr tmpls;
    // What the GGUF carried, before init's fallbacks and patches.
    bool had_default      = false;
    bool had_tool_use     = false;
    bool chatml_fallback  = false;
};

using namespace llb_shim;

namespace {

// ---- templates -----------------------------------------------------------------------------

ojson caps_json(const chat_template_caps & caps) {
    ojson out = ojson::object();
    for (const auto & [k, v] : caps.to_map()) {
        out[k] = v;
    }
    return out;
}

// A one-tool request: what a tool-calling client sends first.
common_chat_templates_inputs probe_inputs() {
    common_chat_templates_inputs inputs;
    common_chat_msg user;
    user.role    = "user";
    user.content = "What is the weather in Paris?";
    inputs.messages.push_back(user);
    common_chat_tool tool;
    tool.name        = "get_weather";
    tool.description = "Get the current weather for a city";
    tool.parameters  = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})";
    inputs.tools.push_back(tool);
    inputs.tool_choice           = COMMON_CHAT_TOOL_CHOICE_AUTO;
    inputs.parallel_tool_calls   = true;
    inputs.add_generation_prompt = true;
    inputs.use_jinja             = true;
    return inputs;
}

ojson msg_json(const common_chat_msg & msg) {
    ojson calls = ojson::array();
    for (const auto & tc : msg.tool_calls) {
        calls.push_back({ { "name", tc.name }, { "arguments", tc.arguments }, { "id", tc.id } });
    }
    return {
        { "content", msg.content },
        { "reasoning_content", msg.reasoning_content },
        { "tool_calls", calls },
    };
}

common_chat_tool_choice tool_choice_from(const ojson & v) {
    const std::string s = v.is_string() ? v.get<std::string>() : "auto";
    if (s == "auto") {
        return COMMON_CHAT_TOOL_CHOICE_AUTO;
    }
    if (s == "none") {
        return COMMON_CHAT_TOOL_CHOICE_NONE;
    }
    if (s == "required") {
        return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    }
    throw shim_error(LLB_SHIM_INVALID, "tool_choice must be auto, none or required, not " + s);
}

}  // namespace

struct llb_shim_parser {
    common_chat_parser_params params;
};

static std::atomic<bool> g_verbose{false};

// Template rendering is serialized process-wide: the pinned Jinja engine's strftime_now and the
// chat stack's date helper call std::localtime, whose result buffer is shared by all threads, so
// two engines rendering at once would race on it. Renders take milliseconds; generation, which
// is what engines run concurrently, is not under this lock.
// The isolated probe's child (a single-threaded copy of the host, native/isolate.cpp) skips it:
// the copy of the mutex may be held by a host thread that does not exist there.
static std::mutex g_render_mutex;

struct render_lock {
    std::unique_lock<std::mutex> lk;
    render_lock() {
        if (!llb_shim::in_probe_child) {
            lk = std::unique_lock<std::mutex>(g_render_mutex);
        }
    }
};

static void log_to_stderr(ggml_log_level level, const char * text, void *) {
    (void) level;
    if (g_verbose.load(std::memory_order_relaxed)) {
        std::fputs(text, stderr);
    }
}


// The one character every stack of `g` expects next, or nothing (a choice, a range, a token
// element, or a stack that may end the grammar here).
static std::optional<uint32_t> agreed_char(const llama_grammar & g) {
    std::optional<uint32_t> c;
    for (const auto & stack : g.stacks) {
        if (stack.empty()) {
            return std::nullopt;
        }
        const llama_grammar_element * e = stack.back();
        if (e->type != LLAMA_GRETYPE_CHAR || e[1].type == LLAMA_GRETYPE_CHAR_ALT ||
            e[1].type == LLAMA_GRETYPE_CHAR_RNG_UPPER || (c && *c != e->value)) {
            return std::nullopt;
        }
        c = e->value;
    }
    return c;
}

static void append_utf8(std::string & s, uint32_t c) {
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xC0 | (c >> 6));
        s += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += char(0xE0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    } else {
        s += char(0xF0 | (c >> 18));
        s += char(0x80 | ((c >> 12) & 0x3F));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    }
}

// Advances a copy of the stacks character by character while they agree; the grammar's own
// stacks are restored before returning (also when llama.cpp throws).
static std::string forced_text(llama_grammar & g, size_t max_bytes) {
    const llama_grammar_stacks saved = g.stacks;
    std::string out;
    try {
        while (!g.stacks.empty()) {
            const std::optional<uint32_t> c = agreed_char(g);
            if (!c || *c == 0 || *c > 0x10FFFF) {
                break;
            }
            std::string next = out;
            append_utf8(next, *c);
            if (next.size() > max_bytes) {
                break;
            }
            out = std::move(next);
            llama_grammar_accept(&g, *c);
        }
    } catch (...) {
        g.stacks = saved;
        throw;
    }
    g.stacks = saved;
    return out;
}

extern "C" {

void llb_shim_set_logging(int32_t verbose) {
    try {
        g_verbose.store(verbose != 0);
        llama_log_set(log_to_stderr, nullptr);
        if (verbose) {
            common_log_resume(common_log_main());
        } else {
            common_log_pause(common_log_main());
        }
    } catch (...) {
        // Logging setup is best effort; never throw across the boundary.
    }
}

void llb_shim_string_free(char * s) {
    std::free(s);
}

void llb_shim_testing_throw_next(void) {
    throw_next = true;
}

void llb_shim_testing_clear(void) {
    throw_next = false;
}

llb_shim_status llb_shim_templates_from_strings(const char * default_src, const char * tool_use_src,
                                                const char * bos_text, const char * eos_text,
                                                int32_t add_bos, int32_t add_eos,
                                                llb_shim_templates ** out, char ** err) {
    return guard(err, [&] {
        render_lock lock;
        if (!out) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out = nullptr;
        auto t = std::make_unique<llb_shim_templates>();
        const std::string def  = default_src ? default_src : "";
        const std::string tool = tool_use_src ? tool_use_src : "";
        t->had_default  = default_src != nullptr && !def.empty();
        t->had_tool_use = tool_use_src != nullptr && !tool.empty();
        // As common_chat_templates_init(model, ""): an absent or "chatml" default takes the
        // tool_use variant, else llama.cpp's ChatML ("chatml" as override selects it).
        std::string override_src = def;
        if (def.empty() || def == "chatml") {
            override_src = tool.empty() ? "chatml" : tool;
        }
        t->chatml_fallback = (def.empty() || def == "chatml") && tool.empty();
        try {
            t->tmpls = common_chat_templates_init(nullptr, override_src, bos_text ? bos_text : "",
                                                  eos_text ? eos_text : "");
        } catch (const std::exception &) {
            // init rethrows a sliced std::exception ("std::exception"): build the template alone
            // to recover the parser's message.
            std::string msg = "unknown error";
            try {
                common_chat_template probe(override_src, bos_text ? bos_text : "", eos_text ? eos_text : "");
            } catch (const std::exception & e) {
                msg = e.what();
            }
            throw shim_error(LLB_SHIM_TEMPLATE, "chat template failed to parse: " + msg);
        }
        t->tmpls->add_bos               = add_bos != 0;
        t->tmpls->add_eos               = add_eos != 0;
        t->tmpls->has_explicit_template = t->had_default || t->had_tool_use;
        if (!tool.empty()) {
            // init ignores a tool_use variant that fails to parse; so do we.
            try {
                t->tmpls->template_tool_use = std::make_unique<common_chat_template>(
                    tool, t->tmpls->template_default->bos_token(), t->tmpls->template_default->eos_token());
            } catch (const std::exception &) {
                t->tmpls->template_tool_use.reset();
            }
        }
        *out = t.release();
    });
}

llb_shim_status llb_shim_templates_from_model(const llama_model * model, llb_shim_templates ** out, char ** err) {
    return guard(err, [&] {
        render_lock lock;
        if (!model || !out) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out = nullptr;
        auto t = std::make_unique<llb_shim_templates>();
        const char * def  = llama_model_chat_template(model, nullptr);
        const char * tool = llama_model_chat_template(model, "tool_use");
        t->had_default     = def && *def;
        t->had_tool_use    = tool && *tool;
        t->chatml_fallback = (!t->had_default || std::string(def) == "chatml") && !t->had_tool_use;
        try {
            t->tmpls = common_chat_templates_init(model, "");
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_TEMPLATE, std::string("chat template failed to parse: ") + e.what());
        }
        *out = t.release();
    });
}

llb_shim_status llb_shim_templates_exercise(const llb_shim_templates * t, char ** err) {
    return guard(err, [&] {
        render_lock lock;
        if (!t || !t->tmpls) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        const common_chat_templates * tmpls = t->tmpls.get();
        // Plain Jinja renders (no format detection, no parser generation): what the template
        // itself does with a conversation.
        autoparser::generation_params plain;
        plain.messages              = ojson::array({ { { "role", "user" }, { "content", "Hello" } } });
        plain.add_generation_prompt = true;
        try {
            common_chat_template_direct_apply(*tmpls->template_default, plain);
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_TEMPLATE,
                             std::string("the chat template cannot render a one-message conversation: ") + e.what());
        }
        autoparser::generation_params trip;
        trip.messages = ojson::parse(R"([
            {"role":"system","content":"You are a helpful assistant."},
            {"role":"user","content":"What is the weather in Paris?"},
            {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",
              "function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
            {"role":"tool","tool_call_id":"call_1","name":"get_weather","content":"{\"temperature\":21}"},
            {"role":"user","content":"And in Rome?"}])");
        trip.tools = ojson::parse(R"([{"type":"function","function":{"name":"get_weather",
            "description":"Get the weather","parameters":{"type":"object",
            "properties":{"city":{"type":"string"}},"required":["city"]}}}])");
        trip.add_generation_prompt = true;
        const common_chat_template & tool_tmpl =
            tmpls->template_tool_use ? *tmpls->template_tool_use : *tmpls->template_default;
        try {
            common_chat_template_direct_apply(tool_tmpl, trip);
        } catch (const std::exception &) {
            // A template may refuse a shape; only a crash, a hang or a blow-up counts here.
        }
    });
}

llb_shim_status llb_shim_templates_apply(const llb_shim_templates * t, const char * inputs_json, char ** out_json,
                                         char ** err) {
    return guard(err, [&] {
        render_lock lock;
        if (!t || !t->tmpls || !inputs_json || !out_json) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        ojson in;
        std::vector<common_chat_msg> messages;
        std::vector<common_chat_tool> tools;
        try {
            in       = ojson::parse(inputs_json);
            messages = common_chat_msgs_parse_oaicompat(in.at("messages"));
            if (in.contains("tools") && in.at("tools").is_array()) {
                tools = common_chat_tools_parse_oaicompat(in.at("tools"));
            }
        } catch (const shim_error &) {
            throw;
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_INVALID, std::string("invalid messages or tools: ") + e.what());
        }
        common_chat_templates_inputs inputs;
        inputs.messages              = std::move(messages);
        inputs.tools                 = std::move(tools);
        inputs.tool_choice           = tool_choice_from(in.value("tool_choice", ojson("auto")));
        inputs.parallel_tool_calls   = in.value("parallel_tool_calls", false);
        inputs.reasoning_format      = common_reasoning_format_from_name(in.value("reasoning_format", std::string("none")));
        inputs.enable_thinking       = in.value("enable_thinking", true);
        inputs.add_generation_prompt = in.value("add_generation_prompt", true);
        inputs.use_jinja             = true;
        inputs.add_bos               = t->tmpls->add_bos;
        inputs.add_eos               = t->tmpls->add_eos;
        if (in.contains("json_schema") && !in.at("json_schema").is_null()) {
            inputs.json_schema = in.at("json_schema").dump();
        }
        if (in.contains("chat_template_kwargs") && in.at("chat_template_kwargs").is_object()) {
            for (const auto & item : in.at("chat_template_kwargs").items()) {
                inputs.chat_template_kwargs[item.key()] = item.value().dump();
            }
        }
        common_chat_params params;
        try {
            params = common_chat_templates_apply(t->tmpls.get(), inputs);
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_TEMPLATE, e.what());
        }
        ojson triggers = ojson::array();
        for (const auto & tr : params.grammar_triggers) {
            triggers.push_back({ { "type", (int) tr.type }, { "value", tr.value } });
        }
        ojson out = {
            { "prompt", params.prompt },
            { "format", (int) params.format },
            { "format_name", common_chat_format_name(params.format) },
            { "grammar", params.grammar },
            { "grammar_lazy", params.grammar_lazy },
            { "grammar_triggers", triggers },
            { "preserved_tokens", params.preserved_tokens },
            { "additional_stops", params.additional_stops },
            { "generation_prompt", params.generation_prompt },
            { "parser", params.parser },
            { "supports_thinking", params.supports_thinking },
            { "thinking_start_tag", params.thinking_start_tag },
            { "thinking_end_tag", params.thinking_end_tag },
        };
        *out_json = dup_string(out.dump(-1, ' ', false, ojson::error_handler_t::replace));
    });
}

llb_shim_status llb_shim_parser_new(int32_t format, const char * parser, const char * generation_prompt,
                                    const char * reasoning_format, int32_t parse_tool_calls, llb_shim_parser ** out,
                                    char ** err) {
    return guard(err, [&] {
        if (!out || format < 0 || format >= COMMON_CHAT_FORMAT_COUNT) {
            throw shim_error(LLB_SHIM_INVALID, "bad parser arguments");
        }
        *out   = nullptr;
        auto p = std::make_unique<llb_shim_parser>();
        p->params.format            = (common_chat_format) format;
        p->params.generation_prompt = generation_prompt ? generation_prompt : "";
        p->params.reasoning_format  = common_reasoning_format_from_name(reasoning_format ? reasoning_format : "none");
        p->params.parse_tool_calls  = parse_tool_calls != 0;
        if (parser && *parser) {
            p->params.parser.load(parser);
        }
        *out = p.release();
    });
}

void llb_shim_parser_free(llb_shim_parser * p) {
    delete p;
}

llb_shim_status llb_shim_parser_parse(const llb_shim_parser * p, const char * text, size_t len, int32_t is_partial,
                                      char ** out_json, char ** err) {
    return guard(err, [&] {
        if (!p || (!text && len > 0) || !out_json) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        common_chat_msg msg;
        try {
            msg = common_chat_parse(std::string(text ? text : "", len), is_partial != 0, p->params);
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_PARSE, e.what());
        }
        *out_json = dup_string(msg_json(msg).dump(-1, ' ', false, ojson::error_handler_t::replace));
    });
}

llb_shim_status llb_shim_tool_section_grammar(const char * parser, const char * tools_json, char ** out_grammar,
                                              char ** err) {
    return guard(err, [&] {
        if (!parser || !tools_json || !out_grammar) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        common_peg_arena arena;
        arena.load(parser);
        const ojson tools = ojson::parse(tools_json);
        std::string grammar = build_grammar([&](const common_grammar_builder & builder) {
            if (tools.is_array()) {
                for (const auto & tool : tools) {
                    if (!tool.contains("function")) {
                        continue;
                    }
                    const auto & function = tool.at("function");
                    auto schema = function.contains("parameters") ? function.at("parameters") : ojson::object();
                    builder.resolve_refs(schema);
                }
            }
            arena.build_grammar(builder, /* lazy = */ true);
        });
        // No trigger rule: the lazy root is empty.
        if (grammar.find("root ::= \n") != std::string::npos) {
            grammar.clear();
        }
        *out_grammar = dup_string(grammar);
    });
}

llb_shim_status llb_shim_grammar_new(const llama_vocab * vocab, const char * grammar, int32_t lazy,
                                     const char ** patterns, size_t n_patterns, const int32_t * tokens,
                                     size_t n_tokens, llama_sampler ** out, char ** err) {
    return guard(err, [&] {
        if (!vocab || !grammar || !out) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out = lazy ? llama_sampler_init_grammar_lazy_patterns(vocab, grammar, "root", patterns, n_patterns,
                                                                (const llama_token *) tokens, n_tokens)
                    : llama_sampler_init_grammar(vocab, grammar, "root");
        if (!*out) {
            throw shim_error(LLB_SHIM_INVALID, "the grammar does not parse");
        }
    });
}

llb_shim_status llb_shim_sampler_accept(llama_sampler * s, int32_t token, char ** err) {
    return guard(err, [&] {
        if (!s) {
            throw shim_error(LLB_SHIM_INVALID, "NULL sampler");
        }
        llama_sampler_accept(s, token);
    });
}

llb_shim_status llb_shim_sampler_apply(llama_sampler * s, llama_token_data_array * cur, char ** err) {
    return guard(err, [&] {
        if (!s || !cur) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        llama_sampler_apply(s, cur);
    });
}

llb_shim_status llb_shim_grammar_forced(llama_sampler * s, size_t max_bytes, char ** out_text, char ** err) {
    return guard(err, [&] {
        if (!s || !out_text) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        if (std::strcmp(llama_sampler_name(s), "grammar") != 0) {
            throw shim_error(LLB_SHIM_INVALID, "not a grammar sampler");
        }
        llama_grammar * g = static_cast<llama_sampler_grammar *>(s->ctx)->grammar;
        std::string out;
        if (g && !g->awaiting_trigger && g->partial_utf8.n_remain == 0) {
            out = forced_text(*g, max_bytes);
        }
        *out_text = dup_string(out);
    });
}

void llb_shim_templates_free(llb_shim_templates * t) {
    delete t;
}

llb_shim_status llb_shim_templates_probe(const llb_shim_templates * t, char ** out_json, char ** err) {
    return guard(err, [&] {
        render_lock lock;
        if (!t || !out_json || !t->tmpls) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        const common_chat_templates * tmpls = t->tmpls.get();
        const common_chat_template & source =
            tmpls->template_tool_use ? *tmpls->template_tool_use : *tmpls->template_default;
        ojson out;
        out["caps"] = caps_json(source.original_caps());
        out["caps_source"] = tmpls->template_tool_use ? "tool_use" : (t->chatml_fallback ? "chatml_fallback" : "default");
        out["has_tool_use_template"] = t->had_tool_use;
        out["chat_template"] = source.source();
        out["bos_token"] = tmpls->template_default->bos_token();
        out["eos_token"] = tmpls->template_default->eos_token();
        try {
            const common_chat_params params = common_chat_templates_apply(tmpls, probe_inputs());
            out["chat_format"]       = common_chat_format_name(params.format);
            out["tool_parser_error"] = nullptr;
        } catch (const std::exception & e) {
            out["chat_format"]       = nullptr;
            out["tool_parser_error"] = e.what();
        }
        // The error text can hold a cut multi-byte sequence of the template: replace, never throw.
        *out_json = dup_string(out.dump(-1, ' ', false, ojson::error_handler_t::replace));
    });
}

}  // extern "C"

struct llb_shim_triggers {
    std::vector<llama_grammar_trigger_pattern> patterns;
};

llb_shim_status llb_shim_triggers_new(const char ** patterns, size_t n_patterns, llb_shim_triggers ** out,
                                      char ** err) {
    return guard(err, [&] {
        if (!out || (n_patterns > 0 && !patterns)) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        auto t = std::make_unique<llb_shim_triggers>();
        for (size_t i = 0; i < n_patterns; i++) {
            auto & p = t->patterns.emplace_back();
            p.pattern = patterns[i] ? patterns[i] : "";
            try {
                p.regex = std::regex(p.pattern);
            } catch (const std::regex_error & e) {
                throw shim_error(LLB_SHIM_INVALID, std::string("trigger pattern: ") + e.what());
            }
        }
        *out = t.release();
    });
}

llb_shim_status llb_shim_triggers_find(const llb_shim_triggers * t, const char * text, size_t len,
                                       int64_t * out_start, char ** err) {
    return guard(err, [&] {
        if (!t || (len > 0 && !text) || !out_start) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out_start = -1;
        const std::string input(text ? text : "", len);
        for (const auto & p : t->patterns) {
            size_t start = p.find(input);
            if (start != std::string::npos) {
                *out_start = static_cast<int64_t>(start);
                return;
            }
        }
    });
}

void llb_shim_triggers_free(llb_shim_triggers * t) {
    delete t;
}

int32_t llb_shim_context_reference_kernels(struct llama_context * ctx, int32_t on) {
    if (!ctx) {
        return 0;
    }
    ggml_backend_sched_t sched = ctx->get_sched();
    if (!sched) {
        return 0;
    }
    using set_use_ref_t = void (*)(ggml_backend_t, bool);
    int32_t n = 0;
    for (int i = 0; i < ggml_backend_sched_get_n_backends(sched); i++) {
        ggml_backend_t b = ggml_backend_sched_get_backend(sched, i);
        ggml_backend_dev_t dev = b ? ggml_backend_get_device(b) : nullptr;
        if (!dev || ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) {
            continue;
        }
        auto set = (set_use_ref_t) ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev),
                                                                     "ggml_backend_cpu_set_use_ref");
        if (set) {
            set(b, on != 0);
            n++;
        }
    }
    return n;
}
