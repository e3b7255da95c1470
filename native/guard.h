// The shim's exception boundary, shared by shim.cpp and isolate.cpp: every extern "C" body runs
// inside guard(), which turns any C++ exception into a status and a message.
#pragma once

#include "shim.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace llb_shim {

// A failure with a precise status, thrown inside the shim only.
struct shim_error : std::runtime_error {
    llb_shim_status status;
    shim_error(llb_shim_status s, const std::string & msg) : std::runtime_error(msg), status(s) {}
};

// Test-only fault injection (llb_shim_testing_throw_next): the next guarded call on this thread
// throws from inside its guard, as an exception from deep in llama.cpp would.
inline thread_local bool throw_next = false;

// Set in the isolated probe's child process (native/isolate.cpp), which is single-threaded: locks
// copied from the host at fork() may be held by threads that do not exist there.
inline bool in_probe_child = false;

inline char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    if (!p) {
        throw std::bad_alloc();
    }
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

inline void set_err(char ** err, const std::string & msg) noexcept {
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

template <typename F> llb_shim_status guard(char ** err, F && body) noexcept {
    if (err) {
        *err = nullptr;
    }
    try {
        if (throw_next) {
            throw_next = false;
            throw std::runtime_error("llb fault injection: C++ exception thrown inside the shim");
        }
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

}  // namespace llb_shim
