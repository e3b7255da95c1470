/*
 * Zeroing big buffers by returning their pages (Linux).
 *
 * llama.cpp allocates a context's KV cache (n_ctx cells for every layer) and then clears it with
 * memset(…, 0, size) "to avoid NaNs in the padding". The memset touches every page, so a pool
 * whose KV budget is 4096 cells × n_parallel pays its whole budget in resident memory before it
 * holds one token. libllb.so is linked with `-Wl,--wrap=memset` (build.rs): a memset of zero over
 * at least LLB_ZERO_PAGES_MIN bytes of *private anonymous* memory gives the whole pages back with
 * madvise(MADV_DONTNEED) instead. Linux defines the result: the next access to such a page is
 * zero-fill-on-demand, exactly what the memset would have written. So the KV cache becomes
 * resident as tokens are written into it, and a cleared sequence's memory is returned too.
 *
 * Anything else — a non-zero value, a small size, a file-backed or shared mapping, a locked page
 * (madvise fails), a system without /proc — is the plain memset.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LLB_ZERO_PAGES_MIN ((size_t)8 << 20)

void *__real_memset(void *s, int c, size_t n);

/* Parses one /proc/self/maps line: "start-end perms offset dev inode [path]". Returns 1 when it
 * describes a private, writable, anonymous mapping covering [a, b). */
static int anonymous_private_covers(const char *line, uintptr_t a, uintptr_t b) {
    char *end;
    unsigned long long lo = strtoull(line, &end, 16);
    if (*end != '-') return 0;
    unsigned long long hi = strtoull(end + 1, &end, 16);
    if (!(lo <= a && b <= hi)) return 0;
    char perms[5] = {0};
    unsigned long long off, inode;
    unsigned dmaj, dmin;
    int path_at = 0;
    if (sscanf(end, " %4s %llx %x:%x %llu %n", perms, &off, &dmaj, &dmin, &inode, &path_at) < 5) return 0;
    const char *path = end + path_at;
    int anonymous = inode == 0 && (*path == '\0' || *path == '\n' || strncmp(path, "[heap]", 6) == 0 ||
                                   strncmp(path, "[anon:", 6) == 0);
    return perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && anonymous;
}

/* Whether one private anonymous mapping holds all of [a, b). Reads /proc/self/maps in pieces
 * with a stack buffer: no allocation inside memset. */
static int is_private_anonymous(uintptr_t a, uintptr_t b) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[8192];
    size_t have = 0;
    int found = 0;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        have += (size_t)got;
        buf[have] = '\0';
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            if (anonymous_private_covers(line, a, b)) found = 1;
            line = nl + 1;
        }
        if (found) break;
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: skip it */
    }
    close(fd);
    return found;
}

void *__wrap_memset(void *s, int c, size_t n) {
    if (c != 0 || n < LLB_ZERO_PAGES_MIN) return __real_memset(s, c, n);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)s, end = start + n;
    uintptr_t a = (start + page - 1) & ~(page - 1), b = end & ~(page - 1);
    if (b <= a || !is_private_anonymous(a, b) || madvise((void *)a, b - a, MADV_DONTNEED) != 0) {
        return __real_memset(s, c, n);
    }
    __real_memset(s, 0, a - start);
    __real_memset((void *)b, 0, end - b);
    return s;
}

#ifdef LLB_ZERO_PAGES_OWN_MEMSET
/* Toolchains whose linker has no --wrap (zig's, for the glibc 2.28 release build; build.rs,
 * LLB_CPU_VARIANTS=1): this object defines memset itself, with hidden visibility, so every memset
 * call in the library it is linked into binds here at link time, and nothing outside that library
 * sees it. The real memset is glibc's __memset_chk with no bound (exported since glibc 2.3.4),
 * called through a volatile pointer so that no compiler folds it back into a call to memset. */
extern void *__memset_chk(void *s, int c, size_t n, size_t destlen);
static void *(*volatile llb_memset_chk)(void *, int, size_t, size_t) = __memset_chk;

void *__real_memset(void *s, int c, size_t n) { return llb_memset_chk(s, c, n, (size_t)-1); }

__attribute__((visibility("hidden"))) void *memset(void *s, int c, size_t n) { return __wrap_memset(s, c, n); }
#endif
