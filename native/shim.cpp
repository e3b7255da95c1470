// llb shim over llama.cpp's chat stack. See shim.h for the conventions.
//
// Every extern "C" function body runs inside guard(), which turns any C++ exception into a status
// and a message: nothing thrown by llama.cpp's Jinja engine, parser or nlohmann crosses into Rust.

#include "shim.h"

#include "chat_templates_layout.h"

#include "chat.h"
#include "log.h"
#include "gguf.h"
#include "ggml.h"
#include "llama.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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

namespace {

// A failure with a precise status, thrown inside the shim only.
struct shim_error : std::runtime_error {
    llb_shim_status status;
    shim_error(llb_shim_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    if (!p) {
        throw std::bad_alloc();
    }
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

void set_err(char ** err, const std::string & msg) {
    if (!err) {
        return;
    }
    // Allocation failure while reporting a failure: report nothing rather than throw.
    char * p = static_cast<char *>(std::malloc(msg.size() + 1));
    if (p) {
        std::memcpy(p, msg.data(), msg.size());
        p[msg.size()] = '\0';
    }
    *err = p;
}

template <typename F>
llb_shim_status guard(char ** err, F && body) noexcept {
    if (err) {
        *err = nullptr;
    }
    try {
        body();
        return LLB_SHIM_OK;
    } catch (const shim_error & e) {
        set_err(err, e.what());
        return e.status;
    } catch (const std::bad_alloc &) {
        set_err(err, "out of memory");
        return LLB_SHIM_INTERNAL;
    } catch (const std::exception & e) {
        set_err(err, e.what());
        return LLB_SHIM_INTERNAL;
    } catch (...) {
        set_err(err, "unknown C++ exception");
        return LLB_SHIM_INTERNAL;
    }
}

// ---- GGUF header ---------------------------------------------------------------------------

struct gguf_ptr {
    gguf_context * ctx = nullptr;
    ~gguf_ptr() {
        if (ctx) {
            gguf_free(ctx);
        }
    }
};

std::optional<std::string> kv_str(const gguf_context * ctx, const std::string & key) {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0 || gguf_get_kv_type(ctx, id) != GGUF_TYPE_STRING) {
        return std::nullopt;
    }
    return std::string(gguf_get_val_str(ctx, id));
}

std::optional<int64_t> kv_int(const gguf_context * ctx, const std::string & key) {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0) {
        return std::nullopt;
    }
    switch (gguf_get_kv_type(ctx, id)) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8(ctx, id);
        case GGUF_TYPE_INT8:   return gguf_get_val_i8(ctx, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, id);
        case GGUF_TYPE_INT16:  return gguf_get_val_i16(ctx, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, id);
        case GGUF_TYPE_INT32:  return gguf_get_val_i32(ctx, id);
        case GGUF_TYPE_UINT64: return (int64_t) gguf_get_val_u64(ctx, id);
        case GGUF_TYPE_INT64:  return gguf_get_val_i64(ctx, id);
        default:               return std::nullopt;
    }
}

std::optional<bool> kv_bool(const gguf_context * ctx, const std::string & key) {
    const int64_t id = gguf_find_key(ctx, key.c_str());
    if (id < 0 || gguf_get_kv_type(ctx, id) != GGUF_TYPE_BOOL) {
        return std::nullopt;
    }
    return gguf_get_val_bool(ctx, id);
}

void append_utf8(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += (char) cp;
    } else if (cp < 0x800) {
        out += (char) (0xC0 | (cp >> 6));
        out += (char) (0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char) (0xE0 | (cp >> 12));
        out += (char) (0x80 | ((cp >> 6) & 0x3F));
        out += (char) (0x80 | (cp & 0x3F));
    } else {
        out += (char) (0xF0 | (cp >> 18));
        out += (char) (0x80 | ((cp >> 12) & 0x3F));
        out += (char) (0x80 | ((cp >> 6) & 0x3F));
        out += (char) (0x80 | (cp & 0x3F));
    }
}

// GPT-2 byte-level BPE: printable code points stand for raw bytes.
std::string byte_level_decode(const std::string & text) {
    static const auto table = [] {
        // code point -> byte, as in GPT-2's bytes_to_unicode()
        std::vector<int> cp_to_byte(512, -1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            if (printable) {
                cp_to_byte[b] = b;
            } else {
                cp_to_byte[256 + n] = b;
                ++n;
            }
        }
        return cp_to_byte;
    }();
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        const unsigned char c = text[i];
        uint32_t cp;
        size_t len;
        if (c < 0x80) { cp = c; len = 1; }
        else if ((c >> 5) == 0x6 && i + 1 < text.size()) { cp = ((c & 0x1F) << 6) | (text[i + 1] & 0x3F); len = 2; }
        else if ((c >> 4) == 0xE && i + 2 < text.size()) { cp = ((c & 0x0F) << 12) | ((text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F); len = 3; }
        else if ((c >> 3) == 0x1E && i + 3 < text.size()) { cp = ((c & 0x07) << 18) | ((text[i + 1] & 0x3F) << 12) | ((text[i + 2] & 0x3F) << 6) | (text[i + 3] & 0x3F); len = 4; }
        else { out += (char) c; ++i; continue; }
        if (cp < table.size() && table[cp] >= 0) {
            out += (char) table[cp];
        } else {
            append_utf8(out, cp);
        }
        i += len;
    }
    return out;
}

std::string spm_unescape(std::string text) {
    static const std::string sep = "\xE2\x96\x81";  // U+2581
    size_t pos = 0;
    while ((pos = text.find(sep, pos)) != std::string::npos) {
        text.replace(pos, sep.size(), " ");
        pos += 1;
    }
    return text;
}

// The text llama.cpp's common_token_to_piece(vocab, id, special=true) gives, from the header alone.
std::optional<std::string> token_text(const gguf_context * ctx, const std::string & model, int64_t id) {
    const int64_t tok_key = gguf_find_key(ctx, "tokenizer.ggml.tokens");
    if (id < 0 || tok_key < 0 || gguf_get_kv_type(ctx, tok_key) != GGUF_TYPE_ARRAY ||
        gguf_get_arr_type(ctx, tok_key) != GGUF_TYPE_STRING || (size_t) id >= gguf_get_arr_n(ctx, tok_key)) {
        return std::nullopt;
    }
    const std::string text = gguf_get_arr_str(ctx, tok_key, (size_t) id);
    int32_t type = LLAMA_TOKEN_TYPE_NORMAL;
    const int64_t type_key = gguf_find_key(ctx, "tokenizer.ggml.token_type");
    if (type_key >= 0 && gguf_get_kv_type(ctx, type_key) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx, type_key) == GGUF_TYPE_INT32 && (size_t) id < gguf_get_arr_n(ctx, type_key)) {
        type = static_cast<const int32_t *>(gguf_get_arr_data(ctx, type_key))[id];
    }
    switch (type) {
        case LLAMA_TOKEN_TYPE_NORMAL:
            if (model == "gpt2") {
                return byte_level_decode(text);
            }
            return spm_unescape(text);
        case LLAMA_TOKEN_TYPE_BYTE:
            if (text.size() == 6 && text.rfind("<0x", 0) == 0) {
                return std::string(1, (char) std::strtol(text.substr(3, 2).c_str(), nullptr, 16));
            }
            return text;
        default:
            return text;
    }
}

// Default special-token ids per tokenizer model, as llama_vocab::load sets them before reading
// tokenizer.ggml.{bos,eos}_token_id.
void default_special_ids(const std::string & model, const std::string & pre, int64_t & bos, int64_t & eos) {
    bos = -1;
    eos = -1;
    if (model == "llama" || model == "plamo2") {
        bos = 1;
        eos = 2;
    } else if (model == "bert") {
        bos = 101;
    } else if (model == "gpt2" || model == "hybriddna" || model == "whitespace") {
        bos = 11;
        eos = 11;
    } else if (model == "t5") {
        eos = 1;
    }
    if (pre == "glm4" || pre == "chatglm-bpe") {
        bos = -1;
    }
}

ojson read_header(const char * path) {
    FILE * f = std::fopen(path, "rb");
    if (!f) {
        throw shim_error(LLB_SHIM_IO, std::string("cannot open ") + path + ": " + std::strerror(errno));
    }
    char magic[4] = {0, 0, 0, 0};
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        throw shim_error(LLB_SHIM_NOT_GGUF, std::string(path) + " is not a GGUF file (bad magic)");
    }

    gguf_init_params params = { /* no_alloc = */ true, /* ctx = */ nullptr };
    gguf_ptr g;
    g.ctx = gguf_init_from_file(path, params);
    if (!g.ctx) {
        throw shim_error(LLB_SHIM_NOT_GGUF, std::string(path) + " is a truncated or corrupt GGUF file");
    }
    const gguf_context * ctx = g.ctx;

    ojson out;
    const auto arch = kv_str(ctx, "general.architecture");
    out["architecture"] = arch ? ojson(*arch) : ojson(nullptr);
    const auto name = kv_str(ctx, "general.name");
    out["name"] = name ? ojson(*name) : ojson(nullptr);
    std::optional<int64_t> n_ctx;
    if (arch) {
        n_ctx = kv_int(ctx, *arch + ".context_length");
    }
    out["n_ctx_train"] = n_ctx ? ojson(*n_ctx) : ojson(nullptr);

    uint64_t n_params = 0;
    uint64_t data_end = 0;
    const int64_t n_tensors = gguf_get_n_tensors(ctx);
    for (int64_t i = 0; i < n_tensors; ++i) {
        const ggml_type type = gguf_get_tensor_type(ctx, i);
        const size_t bytes   = gguf_get_tensor_size(ctx, i);
        const size_t tsize   = ggml_type_size(type);
        if (tsize > 0) {
            n_params += (uint64_t) (bytes / tsize) * (uint64_t) ggml_blck_size(type);
        }
        data_end = std::max<uint64_t>(data_end, (uint64_t) gguf_get_tensor_offset(ctx, i) + bytes);
    }
    // With no_alloc the reader never touches tensor data: check the file holds all of it, so a
    // download cut short is reported here rather than at load time.
    if (n_tensors > 0) {
        const uint64_t need = (uint64_t) gguf_get_data_offset(ctx) + data_end;
        FILE * sf = std::fopen(path, "rb");
        long long have = -1;
        if (sf && std::fseek(sf, 0, SEEK_END) == 0) {
            have = std::ftell(sf);
        }
        if (sf) {
            std::fclose(sf);
        }
        if (have >= 0 && (uint64_t) have < need) {
            throw shim_error(LLB_SHIM_NOT_GGUF, std::string(path) + " is a truncated GGUF file: its tensors need " +
                                                     std::to_string(need) + " bytes, the file has " + std::to_string(have));
        }
    }
    out["n_params"]  = n_params;
    out["n_tensors"] = n_tensors;

    const auto tmpl = kv_str(ctx, "tokenizer.chat_template");
    out["chat_template"] = tmpl ? ojson(*tmpl) : ojson(nullptr);
    const auto tool_use = kv_str(ctx, "tokenizer.chat_template.tool_use");
    out["tool_use_template"] = tool_use ? ojson(*tool_use) : ojson(nullptr);

    const std::string model = kv_str(ctx, "tokenizer.ggml.model").value_or("");
    const std::string pre   = kv_str(ctx, "tokenizer.ggml.pre").value_or("");
    out["tokenizer_model"]  = model.empty() ? ojson(nullptr) : ojson(model);
    int64_t n_vocab = 0;
    {
        const int64_t k = gguf_find_key(ctx, "tokenizer.ggml.tokens");
        if (k >= 0 && gguf_get_kv_type(ctx, k) == GGUF_TYPE_ARRAY) {
            n_vocab = (int64_t) gguf_get_arr_n(ctx, k);
        }
    }
    out["n_vocab"] = n_vocab;

    int64_t bos, eos;
    default_special_ids(model, pre, bos, eos);
    if (auto v = kv_int(ctx, "tokenizer.ggml.bos_token_id"); v && *v >= 0 && *v < n_vocab) {
        bos = *v;
    }
    if (auto v = kv_int(ctx, "tokenizer.ggml.eos_token_id"); v && *v >= 0 && *v < n_vocab) {
        eos = *v;
    }
    const auto bos_text = token_text(ctx, model, bos);
    const auto eos_text = token_text(ctx, model, eos);
    out["bos_text"] = bos_text ? ojson(*bos_text) : ojson(nullptr);
    out["eos_text"] = eos_text ? ojson(*eos_text) : ojson(nullptr);
    // Defaults as llama_vocab: SPM/WPM/UGM add BOS unless told otherwise.
    const bool add_bos_default = model == "llama" || model == "bert";
    out["add_bos"] = kv_bool(ctx, "tokenizer.ggml.add_bos_token").value_or(add_bos_default);
    out["add_eos"] = kv_bool(ctx, "tokenizer.ggml.add_eos_token").value_or(model == "t5");
    return out;
}

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

}  // namespace

static std::atomic<bool> g_verbose{false};

static void log_to_stderr(ggml_log_level level, const char * text, void *) {
    (void) level;
    if (g_verbose.load(std::memory_order_relaxed)) {
        std::fputs(text, stderr);
    }
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

llb_shim_status llb_shim_gguf_header(const char * path, char ** out_json, char ** err) {
    return guard(err, [&] {
        if (!path || !out_json) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out_json = dup_string(read_header(path).dump());
    });
}

llb_shim_status llb_shim_templates_from_strings(const char * default_src, const char * tool_use_src,
                                                const char * bos_text, const char * eos_text,
                                                int32_t add_bos, int32_t add_eos,
                                                llb_shim_templates ** out, char ** err) {
    return guard(err, [&] {
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
        } catch (const std::exception & e) {
            throw shim_error(LLB_SHIM_TEMPLATE, std::string("chat template failed to parse: ") + e.what());
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

void llb_shim_templates_free(llb_shim_templates * t) {
    delete t;
}

llb_shim_status llb_shim_templates_probe(const llb_shim_templates * t, char ** out_json, char ** err) {
    return guard(err, [&] {
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
        *out_json = dup_string(out.dump());
    });
}

}  // extern "C"
