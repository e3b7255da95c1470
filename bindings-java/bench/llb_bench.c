/*
 * The C baseline of the Java binding's overhead benchmark (dev.llb.OverheadBenchmark drives it
 * as a subprocess, interleaving its batches with the Java ones).
 *
 *   llb_bench CONFIG_JSON REQUEST_JSON < commands
 *
 * Opens one engine with CONFIG_JSON, then reads commands from stdin, one per line:
 *
 *   warmup N    runs REQUEST_JSON N times untimed; prints "warmup"
 *   infer N     runs REQUEST_JSON N times; prints "infer" and each call's milliseconds
 *               (llb_chat_infer + llb_string_free); exits 1 unless each is a 32-token completion
 *   version N   prints "version" and the mean microseconds of llb_version + llb_string_free
 *
 * At end of input it prints "infer_mean_ms <mean over every timed call> calls <count>".
 * By hand:  printf 'warmup 5\ninfer 20\n' | llb_bench "$CONFIG" "$REQUEST"
 * Build:    cc -O2 -std=c11 -Wall -Wextra -Werror -pedantic -I include llb_bench.c -L DIR -lllb -Wl,-rpath,DIR
 */
#define _POSIX_C_SOURCE 199309L
#include "llb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Progress events arrive here as in any host; returning 0 continues. */
static int32_t on_event(const char *event_json, void *user_data) {
    (void)event_json;
    (void)user_data;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG_JSON REQUEST_JSON < commands\n", argv[0]);
        return 2;
    }
    const char *request = argv[2];
    llb_chat *chat = llb_chat_create(argv[1], on_event, NULL);
    if (chat == NULL) {
        fprintf(stderr, "llb_bench: llb_chat_create failed for %s\n", argv[1]);
        return 1;
    }
    double total_ms = 0;
    long timed = 0;
    char command[32];
    long n;
    while (scanf("%31s %ld", command, &n) == 2) {
        int timing = strcmp(command, "infer") == 0;
        if (timing || strcmp(command, "warmup") == 0) {
            printf("%s", command);
            for (long i = 0; i < n; i++) {
                double t0 = now_ms();
                char *reply = llb_chat_infer(chat, request);
                int ok = strstr(reply, "\"completion_tokens\":32,") != NULL;
                if (!ok) {
                    fprintf(stderr, "llb_bench: not a 32-token completion: %s\n", reply);
                }
                llb_string_free(reply);
                double ms = now_ms() - t0;
                if (!ok) {
                    return 1;
                }
                if (timing) {
                    printf(" %.6f", ms);
                    total_ms += ms;
                    timed++;
                }
            }
            printf("\n");
        } else if (strcmp(command, "version") == 0) {
            double t0 = now_ms();
            for (long i = 0; i < n; i++) {
                llb_string_free(llb_version());
            }
            printf("version %.6f\n", (now_ms() - t0) * 1e3 / (double)n);
        } else {
            fprintf(stderr, "llb_bench: unknown command %s\n", command);
            return 2;
        }
        fflush(stdout);
    }
    llb_chat_destroy(chat);
    printf("infer_mean_ms %.6f calls %ld\n", timed ? total_ms / (double)timed : 0.0, timed);
    return 0;
}
