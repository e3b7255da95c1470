/*
 * Decode tokens/s through llb_chat_infer with the libllb.so named on the command line (dlopen), so
 * one binary measures two builds alike (scripts/bench-variants.sh).
 *   decode LIBLLB.so MODEL.gguf RUNS  -> prints "<median tok/s> <cpu variant>"
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*create_fn)(const char *, void *, void *);
typedef char *(*infer_fn)(void *, const char *);
typedef void (*destroy_fn)(void *);
typedef void (*free_fn)(char *);
typedef char *(*version_fn)(void);

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    create_fn create = (create_fn)dlsym(lib, "llb_chat_create");
    infer_fn infer = (infer_fn)dlsym(lib, "llb_chat_infer");
    destroy_fn destroy = (destroy_fn)dlsym(lib, "llb_chat_destroy");
    free_fn sfree = (free_fn)dlsym(lib, "llb_string_free");
    version_fn version = (version_fn)dlsym(lib, "llb_version");
    char config[4096];
    snprintf(config, sizeof config, "{\"model_path\":\"%s\",\"n_ctx\":2048,\"n_batch\":512}", argv[2]);
    void *chat = create(config, NULL, NULL);
    if (!chat) { fprintf(stderr, "create failed\n"); return 1; }
    const char *reset = "{\"messages\":[{\"role\":\"user\",\"content\":\"reset\"}],\"max_tokens\":1}";
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a long story about the sea.\"}],"
                      "\"temperature\":0,\"max_tokens\":192}";
    int runs = atoi(argv[3]);
    double rates[64];
    for (int i = 0; i < runs && i < 64; i++) {
        sfree(infer(chat, reset));
        char *r = infer(chat, req);
        const char *at = strstr(r, "\"predicted_per_second\":");
        rates[i] = at ? atof(at + strlen("\"predicted_per_second\":")) : 0;
        sfree(r);
    }
    qsort(rates, runs, sizeof rates[0], cmp);
    char *v = version();
    const char *var = strstr(v, "\"variant\":");
    char name[64] = "?";
    if (var) sscanf(var, "\"variant\":\"%63[^\"]", name);
    printf("%.2f %s\n", rates[runs / 2], name);
    sfree(v);
    destroy(chat);
    return 0;
}
