// A lost RPC server must not take the host process down. ggml's RPC client ends every failed
// exchange with GGML_ABORT ("Remote RPC server crashed or returned malformed response"), i.e.
// abort(); ggml calls the abort callback first. While a guarded call below runs on this thread, the
// callback throws instead, the exception unwinds out of ggml and llama.cpp (C++ frames, and
// ggml_abort's C frame, which has unwind tables on the platforms llb builds for) and the guard
// returns an error. Outside guarded calls the callback does what ggml does: print and abort.
//
// The guarded calls also block SIGPIPE on their thread: ggml's transport send()s without
// MSG_NOSIGNAL, and a write to a closed connection would otherwise kill a host that has not
// ignored SIGPIPE. A SIGPIPE raised meanwhile is consumed before the mask is restored.
//
// What the guard cannot cover: llama.cpp frees RPC buffers in destructors (noexcept), so freeing a
// model or context whose server is gone would still abort; src/backend.rs leaks those instead.
//
// A server that goes away without closing its connection (a machine powered off, a network
// partition) would block ggml's transport forever: it sets no timeout, and a recv() waiting for a
// reply on an idle connection without keepalive never returns. build.rs compiles the transport
// with -Dsetsockopt=llb_rpc_setsockopt; the transport sets TCP_NODELAY on every socket it connects,
// and that call here also turns on TCP keepalive and TCP_USER_TIMEOUT, so the kernel ends such a
// connection after `dead_peer_seconds` without an answer from the peer's machine, recv()/send()
// fail, ggml aborts and the guard makes that an error. A server that is slow (a long graph
// compute) is not affected: its kernel answers the keepalive probes. Sockets connected during
// llb_guarded_rpc_add (the handshake at create) also get receive/send timeouts, so a server whose
// process does not answer (stopped, hung) is refused at create instead of hanging it. Those
// timeouts must not outlive the handshake (a graph compute may take longer): they do not, since
// the pinned ggml-rpc caches sockets by weak reference only, so the handshake's socket closes when
// ggml_backend_rpc_add_server returns, and later exchanges connect anew.

#include "rpc_guard.h"

#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>

namespace {

thread_local int guard_depth = 0;
ggml_abort_callback_t previous_callback = nullptr;

// Set once by llb_rpc_guard_install, before any RPC socket exists.
int dead_peer_seconds = 20;
// The handshake at create (llb_guarded_rpc_add) is running on this thread.
thread_local bool in_handshake = false;
constexpr int handshake_seconds = 5;

struct ggml_aborted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void on_abort(const char * message) {
    if (guard_depth > 0) {
        throw ggml_aborted(message);
    }
    if (previous_callback) {
        previous_callback(message);
    } else {
        fprintf(stderr, "%s\n", message);
    }
}

// Blocks SIGPIPE and counts a guarded call for the calling thread.
struct Guard {
    sigset_t old_mask;
    bool pipe_pending_before = false;
    Guard() {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe, &old_mask);
        sigset_t pending;
        sigpending(&pending);
        pipe_pending_before = sigismember(&pending, SIGPIPE) == 1;
        guard_depth++;
    }
    ~Guard() {
        guard_depth--;
        if (!pipe_pending_before) {
            sigset_t pipe;
            sigemptyset(&pipe);
            sigaddset(&pipe, SIGPIPE);
            struct timespec zero = {0, 0};
            while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    }
};

// Best effort: a socket option the platform lacks leaves the connection as ggml made it.
void set_int(int fd, int level, int name, int value) {
    setsockopt(fd, level, name, &value, sizeof value);
}

// The kernel gives up on the peer after `dead_peer_seconds` of silence: keepalive probes start
// after a quarter of it while idle (three probes a quarter apart), and unacknowledged data times
// out at the whole of it.
void detect_dead_peer(int fd) {
    int quarter = dead_peer_seconds / 4 > 0 ? dead_peer_seconds / 4 : 1;
    set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
#if defined(TCP_KEEPIDLE)
    set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, quarter);
#elif defined(TCP_KEEPALIVE)
    set_int(fd, IPPROTO_TCP, TCP_KEEPALIVE, quarter);  // macOS
#endif
#if defined(TCP_KEEPINTVL) && defined(TCP_KEEPCNT)
    set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, quarter);
    set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, 3);
#endif
#if defined(TCP_USER_TIMEOUT)
    set_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, dead_peer_seconds * 1000);
#endif
}

void bound_handshake(int fd) {
    struct timeval tv = {handshake_seconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void copy_message(const char * what, char * err, size_t err_len) {
    if (err && err_len > 0) {
        snprintf(err, err_len, "%s", what);
    }
}

}  // namespace

extern "C" {

void llb_rpc_guard_install(int peer_timeout_seconds) {
    static bool installed = false;
    if (!installed) {
        installed = true;
        previous_callback = ggml_set_abort_callback(on_abort);
        if (peer_timeout_seconds > 0) {
            dead_peer_seconds = peer_timeout_seconds;
        }
    }
}

// setsockopt for ggml's RPC transport (build.rs: -Dsetsockopt=llb_rpc_setsockopt).
int llb_rpc_setsockopt(int fd, int level, int name, const void * value, socklen_t len) {
    int rc = setsockopt(fd, level, name, value, len);
    if (rc == 0 && level == IPPROTO_TCP && name == TCP_NODELAY) {
        detect_dead_peer(fd);
        if (in_handshake) {
            bound_handshake(fd);
        }
    }
    return rc;
}

// llama_decode; INT32_MIN with the message in `err` when ggml aborted (a lost RPC server).
int32_t llb_guarded_decode(llama_context * ctx, llama_batch batch, char * err, size_t err_len) {
    try {
        Guard g;
        return llama_decode(ctx, batch);
    } catch (const std::exception & e) {
        copy_message(e.what(), err, err_len);
        return INT32_MIN;
    }
}

// llama_model_load_from_file (which turns exceptions into NULL itself; the guard makes an
// abort one).
llama_model * llb_guarded_model_load(const char * path, llama_model_params params) {
    try {
        Guard g;
        return llama_model_load_from_file(path, params);
    } catch (const std::exception &) {
        return nullptr;
    }
}

// llama_init_from_model; NULL with the message in `err` when ggml aborted.
llama_context * llb_guarded_init_context(llama_model * model, llama_context_params params, char * err,
                                         size_t err_len) {
    try {
        Guard g;
        return llama_init_from_model(model, params);
    } catch (const std::exception & e) {
        copy_message(e.what(), err, err_len);
        return nullptr;
    }
}

// ggml_backend_rpc_add_server (passed as `add`, the RPC registry's proc address): NULL with the
// message in `err` when the handshake fails.
ggml_backend_reg_t llb_guarded_rpc_add(ggml_backend_reg_t (*add)(const char *), const char * endpoint, char * err,
                                       size_t err_len) {
    struct Handshake {
        Handshake() { in_handshake = true; }
        ~Handshake() { in_handshake = false; }
    };
    try {
        Guard g;
        Handshake h;
        ggml_backend_reg_t reg = add(endpoint);
        // The device list is fetched from the server too.
        if (reg) {
            ggml_backend_reg_dev_count(reg);
        }
        return reg;
    } catch (const std::exception & e) {
        copy_message(e.what(), err, err_len);
        return nullptr;
    }
}

// ggml_backend_dev_memory; false when ggml aborted (an RPC device whose server is gone).
bool llb_guarded_dev_memory(ggml_backend_dev_t dev, size_t * free, size_t * total) {
    try {
        Guard g;
        ggml_backend_dev_memory(dev, free, total);
        return true;
    } catch (const std::exception &) {
        *free = 0;
        *total = 0;
        return false;
    }
}

}  // extern "C"
