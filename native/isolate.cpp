// The caps probe in a child process: a GGUF's chat template is code from whoever made the file,
// and at the pin llama.cpp's Jinja engine has no step, depth or memory budget. A self-recursive
// macro overflows the stack (SIGSEGV), `range(1000000000)` or a string doubled in a loop runs
// until memory is gone. Inspecting a file must not do that to the host process, so the probe
// runs in a fork()ed child with a wall-clock deadline, an address-space budget and its own stack;
// the parent only reads a framed result from a pipe.
//
// The child runs only C++ (llama.cpp's chat stack through the shim's own entry points), then
// _exit()s. It is a fork of a possibly multi-threaded host: glibc's malloc is fork-safe (its
// atfork handlers reset the arenas), and the Jinja engine takes no other lock. The one lock it can
// meet is llama.cpp's log mutex (LOG_ERR on a template that fails to parse); should another host
// thread have held it at the fork, the child blocks and the deadline turns that into a
// template_error, never a hang of the host.

#include "guard.h"
#include "shim.h"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

// What the child hands back: status byte, 8-byte payload length, payload.
constexpr size_t HEADER = 9;
// The child's exit status when an allocation fails: the Jinja engine catches std::bad_alloc like
// any other exception and goes on (the caps probe tries the next input), so a template at the
// memory budget would otherwise grind until the deadline.
constexpr int EXIT_OUT_OF_MEMORY = 42;

void out_of_memory() {
    _exit(EXIT_OUT_OF_MEMORY);
}

struct child_job {
    const char * default_src;
    const char * tool_use_src;
    const char * bos;
    const char * eos;
    int32_t      add_bos;
    int32_t      add_eos;
    // results
    llb_shim_status status = LLB_SHIM_INTERNAL;
    char *          text   = nullptr;  // probe JSON on success, else the message
};

void * run_probe(void * arg) {
    auto * job = static_cast<child_job *>(arg);
    llb_shim_templates * t = nullptr;
    char * err = nullptr;
    job->status = llb_shim_templates_from_strings(job->default_src, job->tool_use_src, job->bos, job->eos,
                                                  job->add_bos, job->add_eos, &t, &err);
    if (job->status != LLB_SHIM_OK) {
        job->text = err;
        return nullptr;
    }
    char * probe = nullptr;
    job->status = llb_shim_templates_probe(t, &probe, &err);
    if (job->status != LLB_SHIM_OK) {
        job->text = err;
        llb_shim_templates_free(t);
        return nullptr;
    }
    job->status = llb_shim_templates_exercise(t, &err);
    if (job->status != LLB_SHIM_OK) {
        job->text = err;
        llb_shim_string_free(probe);
        llb_shim_templates_free(t);
        return nullptr;
    }
    llb_shim_templates_free(t);
    job->status = LLB_SHIM_OK;
    job->text   = probe;
    return nullptr;
}

bool write_all(int fd, const void * data, size_t len) {
    const char * p = static_cast<const char *>(data);
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        p += n;
        len -= (size_t) n;
    }
    return true;
}

// Current address-space size, read with plain syscalls.
uint64_t vm_size_bytes() {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    char buf[64] = { 0 };
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    return std::strtoull(buf, nullptr, 10) * (uint64_t) sysconf(_SC_PAGESIZE);
}

[[noreturn]] void child_main(int fd, child_job & job, uint32_t timeout_ms, uint32_t mem_mb) noexcept {
    // The host's handlers (a JVM's, a sanitizer's) must not run in this copy of the host: a crash
    // here should end the child and be seen by the parent as a signal.
    for (int sig : { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP, SIGXCPU, SIGXFSZ, SIGPIPE }) {
        signal(sig, SIG_DFL);
    }
    struct rlimit core = { 0, 0 };
    setrlimit(RLIMIT_CORE, &core);
    // A backstop should the parent die and never kill us.
    rlim_t cpu = timeout_ms / 1000 + 2;
    struct rlimit cpu_limit = { cpu, cpu + 1 };
    setrlimit(RLIMIT_CPU, &cpu_limit);
    if (mem_mb > 0) {
        uint64_t cur = vm_size_bytes();
        if (cur > 0) {
            rlim_t as = (rlim_t) (cur + (uint64_t) mem_mb * 1024 * 1024);
            struct rlimit as_limit = { as, as };
            setrlimit(RLIMIT_AS, &as_limit);
        }
    }

    std::set_new_handler(out_of_memory);
    llb_shim::in_probe_child = true;

    // The probe on a stack of known size, whatever the calling thread had.
    pthread_attr_t attr;
    pthread_t      th;
    bool ran = false;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setstacksize(&attr, 8u << 20);
        if (pthread_create(&th, &attr, run_probe, &job) == 0) {
            pthread_join(th, nullptr);
            ran = true;
        }
        pthread_attr_destroy(&attr);
    }
    if (!ran) {
        run_probe(&job);
    }

    const char * text = job.text ? job.text : "";
    uint64_t len = std::strlen(text);
    unsigned char header[HEADER];
    header[0] = (unsigned char) job.status;
    std::memcpy(header + 1, &len, sizeof(len));
    bool ok = write_all(fd, header, HEADER) && write_all(fd, text, len);
    _exit(ok ? 0 : 3);
}

int64_t now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

std::string describe_signal(int sig) {
    std::string name;
    switch (sig) {
        case SIGSEGV: name = "SIGSEGV: most likely unbounded recursion overflowing the stack"; break;
        case SIGKILL: name = "SIGKILL"; break;
        case SIGABRT: name = "SIGABRT"; break;
        case SIGBUS:  name = "SIGBUS"; break;
        case SIGXCPU: name = "SIGXCPU: CPU time limit"; break;
        default:      name = "signal " + std::to_string(sig); break;
    }
    return name;
}

}  // namespace

extern "C" llb_shim_status llb_shim_probe_isolated(const char * default_src, const char * tool_use_src,
                                                   const char * bos_text, const char * eos_text, int32_t add_bos,
                                                   int32_t add_eos, uint32_t timeout_ms, uint32_t mem_limit_mb,
                                                   char ** out_json, char ** err) {
    using llb_shim::shim_error;
    return llb_shim::guard(err, [&] {
        if (!out_json) {
            throw shim_error(LLB_SHIM_INVALID, "NULL argument");
        }
        *out_json = nullptr;
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) {
            throw shim_error(LLB_SHIM_INTERNAL, std::string("cannot isolate the template probe: pipe: ") +
                                                    strerror(errno));
        }
        child_job job{ default_src, tool_use_src, bos_text, eos_text, add_bos, add_eos };
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            close(fds[0]);
            close(fds[1]);
            throw shim_error(LLB_SHIM_INTERNAL, std::string("cannot isolate the template probe: fork: ") +
                                                    strerror(e));
        }
        if (pid == 0) {
            close(fds[0]);
            child_main(fds[1], job, timeout_ms, mem_limit_mb);
        }
        close(fds[1]);
        // From here on the child must be reaped whatever happens (even bad_alloc below).
        struct reaper {
            pid_t pid;
            int   fd;
            bool  timed_out = false;
            int   wstatus   = 0;
            bool  reaped    = false;
            void  reap() {
                if (reaped) {
                    return;
                }
                reaped = true;
                close(fd);
                if (timed_out) {
                    kill(pid, SIGKILL);
                }
                pid_t w;
                do {
                    w = waitpid(pid, &wstatus, 0);
                } while (w < 0 && errno == EINTR);
                if (w != pid) {
                    wstatus = -1;  // a host ignoring SIGCHLD: the status is gone
                }
            }
            ~reaper() {
                timed_out = true;  // an exception on the way: stop the child
                reap();
            }
        } r{ pid, fds[0] };

        std::string buf;
        const int64_t deadline = now_ms() + timeout_ms;
        for (;;) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                r.timed_out = true;
                break;
            }
            struct pollfd pfd = { fds[0], POLLIN, 0 };
            int n_ready = poll(&pfd, 1, (int) (left > 1000 ? 1000 : left));
            if (n_ready <= 0) {
                continue;  // EINTR or a timeout slice: the loop re-checks the deadline
            }
            char chunk[65536];
            ssize_t n = read(fds[0], chunk, sizeof(chunk));
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
                continue;
            }
            if (n <= 0) {
                break;  // EOF: the child is done (or dead)
            }
            buf.append(chunk, (size_t) n);
        }
        r.reap();

        uint64_t len = 0;
        if (buf.size() >= HEADER) {
            std::memcpy(&len, buf.data() + 1, sizeof(len));
        }
        if (!r.timed_out && buf.size() >= HEADER && buf.size() - HEADER == len) {
            // A complete frame: trust it even when waitpid could not report.
            auto st = (llb_shim_status) (unsigned char) buf[0];
            if (st != LLB_SHIM_OK) {
                throw shim_error(st, buf.substr(HEADER));
            }
            *out_json = llb_shim::dup_string(buf.substr(HEADER));
            return;
        }
        if (r.timed_out) {
            throw shim_error(LLB_SHIM_TEMPLATE, "the chat template did not finish the caps probe within " +
                                                    std::to_string(timeout_ms) +
                                                    " ms (an unbounded loop?); probe stopped");
        }
        const int ws = r.wstatus;
        if (ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == EXIT_OUT_OF_MEMORY) {
            throw shim_error(LLB_SHIM_TEMPLATE, "the chat template exhausted the caps probe's memory budget (" +
                                                    std::to_string(mem_limit_mb) + " MiB); probe stopped");
        }
        if (ws != -1 && WIFSIGNALED(ws)) {
            throw shim_error(LLB_SHIM_TEMPLATE,
                             "the chat template crashed the caps probe (" + describe_signal(WTERMSIG(ws)) + ")");
        }
        throw shim_error(LLB_SHIM_TEMPLATE,
                         "the caps probe ended without a result (exit status " +
                             std::to_string(ws != -1 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1) + ")");
    });
}
