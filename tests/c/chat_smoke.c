/*
 * C smoke test of the chat ABI, as a C host uses it. argv[1]: a tool-capable fixture,
 * argv[2]: a non-tool fixture. Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include "llb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0;
static int failed = 0;

static void check(int ok, const char *what, const char *detail) {
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAIL: %s\n  %s\n", what, detail ? detail : "");
    }
}

/* ---- a minimal JSON validator (RFC 8259 syntax) --------------------------------------- */
static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}
static const char *value(const char *p, int depth);
static const char *string(const char *p) {
    if (*p != '"') return NULL;
    for (p++; *p && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                int i;
                for (i = 1; i <= 4; i++) if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return *p == '"' ? p + 1 : NULL;
}
static const char *number(const char *p) {
    const char *s = p;
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    if (*p == '.') { p++; if (!(*p >= '0' && *p <= '9')) return NULL; while (*p >= '0' && *p <= '9') p++; }
    if (*p == 'e' || *p == 'E') { p++; if (*p == '+' || *p == '-') p++; if (!(*p >= '0' && *p <= '9')) return NULL; while (*p >= '0' && *p <= '9') p++; }
    return p > s ? p : NULL;
}
static const char *value(const char *p, int depth) {
    if (depth > 64) return NULL;
    p = ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int obj = *p == '{';
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (obj) {
                p = string(ws(p));
                if (!p) return NULL;
                p = ws(p);
                if (*p++ != ':') return NULL;
            }
            p = value(p, depth + 1);
            if (!p) return NULL;
            p = ws(p);
            if (*p == ',') { p++; continue; }
            return *p == close ? p + 1 : NULL;
        }
    }
    if (*p == '"') return string(p);
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    return number(p);
}
static int is_json(const char *text) {
    const char *end = value(text, 0);
    return end && *ws(end) == '\0';
}

/* Copies the JSON string value following `"key":` into out (unescaping \" and \\ only). */
static int string_field(const char *json, const char *key, char *out, size_t cap) {
    char pat[64];
    const char *p;
    size_t n = 0;
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    p = strstr(json, pat);
    if (!p) return 0;
    for (p += strlen(pat); *p && *p != '"' && n + 1 < cap; p++) {
        if (*p == '\\' && (p[1] == '"' || p[1] == '\\')) p++;
        else if (*p == '\\' && p[1] == 'n') { p++; out[n++] = '\n'; continue; }
        out[n++] = *p;
    }
    out[n] = '\0';
    return *p == '"';
}

/* ---- events --------------------------------------------------------------------------- */
struct events {
    int create_failures;
    int tools_unsupported;
    int chunks;
};

static int32_t on_event(const char *event_json, void *user_data) {
    struct events *ev = (struct events *)user_data;
    if (strstr(event_json, "\"type\":\"create_failure\"")) {
        ev->create_failures++;
        if (strstr(event_json, "\"code\":\"tools_unsupported\"") && strstr(event_json, "\"caps\":{")) ev->tools_unsupported++;
    }
    if (strstr(event_json, "\"type\":\"chunk\"")) ev->chunks++;
    return 0;
}

static const char *REQUEST =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris for 3 days?\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Rome\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"city\",\"days\"],"
    "\"additionalProperties\":false}}}],"
    "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"max_tokens\":200,\"seed\":7,\"stream\":true}";

int main(int argc, char **argv) {
    struct events ev = {0, 0, 0};
    char config[4096];
    char args[1024];
    llb_chat *chat;
    char *resp;

    if (argc < 3) {
        fprintf(stderr, "usage: %s TOOLS.gguf PLAIN.gguf\n", argv[0]);
        return 2;
    }

    /* A non-tool model: NULL and the tools_unsupported event. */
    snprintf(config, sizeof config, "{\"model_path\":\"%s\"}", argv[2]);
    chat = llb_chat_create(config, on_event, &ev);
    check(chat == NULL, "a non-tool model is refused", argv[2]);
    check(ev.tools_unsupported == 1, "the refusal comes as a tools_unsupported create_failure with caps", NULL);

    /* A tool-capable model: required → one schema-conforming call. */
    snprintf(config, sizeof config, "{\"model_path\":\"%s\",\"n_ctx\":2048}", argv[1]);
    chat = llb_chat_create(config, on_event, &ev);
    check(chat != NULL, "a tool-capable model loads", argv[1]);
    if (chat) {
        resp = llb_chat_infer(chat, REQUEST);
        check(resp && is_json(resp), "the completion is JSON", resp);
        check(resp && strstr(resp, "\"finish_reason\":\"tool_calls\"") != NULL, "finish_reason tool_calls", resp);
        check(resp && strstr(resp, "\"name\":\"get_weather\"") != NULL, "the call names the tool", resp);
        check(resp && strstr(resp, "\"id\":\"call_") != NULL, "the call has an id", resp);
        if (resp && string_field(resp, "arguments", args, sizeof args)) {
            check(is_json(args), "the arguments parse as JSON", args);
            check((strstr(args, "\"Paris\"") || strstr(args, "\"Rome\"")) && strstr(args, "\"city\"") && strstr(args, "\"days\""),
                  "the arguments follow the schema", args);
        } else {
            check(0, "the completion has arguments", resp);
        }
        check(ev.chunks > 2, "streamed chunks reached the callback", NULL);
        llb_string_free(resp);

        resp = llb_chat_infer(chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"bogus\":1}");
        check(resp && strstr(resp, "\"code\":\"invalid_argument\"") && strstr(resp, "bogus"), "unknown fields are named", resp);
        llb_string_free(resp);
        llb_chat_destroy(chat);
    }
    llb_chat_destroy(NULL);
    passed++;

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
