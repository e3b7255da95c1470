/*
 * C smoke test: what a C host does first. argv[1]: a tool-capable fixture, argv[2]: a
 * non-tool fixture. Prints "N passed, M failed" and exits non-zero on any failure.
 */
#include "llb.h"

#include <stdio.h>
#include <string.h>

static int passed = 0;
static int failed = 0;

static void check(int ok, const char *what, const char *json) {
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAIL: %s\n  got: %s\n", what, json ? json : "(null)");
    }
}

/* JSON from llb is compact (no spaces), so a fragment test is exact enough for a smoke test. */
static void expect(char *json, const char *fragment, const char *what) {
    check(json != NULL && strstr(json, fragment) != NULL, what, json);
    llb_string_free(json);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOOLS.gguf PLAIN.gguf\n", argv[0]);
        return 2;
    }
    expect(llb_version(), "\"type\":\"version\"", "version type");
    expect(llb_version(), "\"chat_stack\":\"b9371\"", "version reports the pinned chat stack");
    expect(llb_version(), "\"abi\":1", "version reports the ABI");

    expect(llb_model_info(argv[1]), "\"supports_tools\":true", "Qwen2.5 fixture is tool-capable");
    expect(llb_model_info(argv[1]), "\"caps_source\":\"default\"", "caps from the default template");
    expect(llb_model_info(argv[2]), "\"supports_tools\":false", "gemma-2 fixture is not tool-capable");

    expect(llb_model_info("/nonexistent/model.gguf"), "\"code\":\"file_not_found\"", "missing file");
    expect(llb_model_info(NULL), "\"code\":\"invalid_argument\"", "NULL path");
    expect(llb_model_info(argv[0]), "\"code\":\"not_a_gguf\"", "an executable is not a GGUF");

    llb_string_free(NULL);
    passed++;

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
