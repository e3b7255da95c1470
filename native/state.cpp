// A sequence's state out of a context and back in (issue 41, "a fast state path"): the bytes of
// llama_state_seq_get_data_ext / llama_state_seq_set_data_ext, with the tensor copies grouped.
//
// llama.cpp's own path copies a sequence's cells one range at a time out of each K and V tensor,
// and one cell at a time back in when the cells it finds free are not contiguous
// (llama_kv_cache::state_write_data / state_read_data). On the CPU each copy is a memcpy of a
// row. On a GPU each is a device copy of a few hundred bytes with a fixed cost of microseconds:
// a pool's sequence, whose cells interleave with the others' (continuous batching gives each
// step's sequences neighbouring cells), comes out in thousands of copies. Here the same memory
// walk (llama_memory_i::state_write / state_read, the interface the public calls use) hands its
// pieces to a writer or reader that keeps them; afterwards the pieces of one tensor that lie in a
// span not much longer than they are cross in one copy of the span: out, the span is read once
// and the pieces taken from it; in, the span is read, the pieces written into it, and the span
// written back (two copies). Nothing else runs on the context meanwhile: the scheduler's thread
// owns it.

#include "guard.h"
#include "shim.h"

#include "ggml-backend.h"
#include "llama-io.h"
#include "llama-memory.h"
#include "llama.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace {

// llama-context.cpp's io_magic: the first word of a sequence's state.
constexpr uint32_t IO_MAGIC = 0xaf143cd8;

// A span may hold this many bytes per piece that are not the pieces' (other sequences' cells)
// and still cross as one copy: about what a device copy's fixed cost moves at bus speed.
constexpr size_t SLACK_PER_PIECE = 64 * 1024;

struct piece {
    ggml_tensor * tensor;
    uint8_t * host;  // where the piece's bytes are in the state buffer
    size_t offset;   // and in the tensor
    size_t size;
};

struct counts {
    size_t copies = 0;
    size_t pieces = 0;
};

bool groups(const ggml_tensor * t, int32_t mode) {
    return mode == 2 || (mode == 1 && t->buffer && !ggml_backend_buffer_is_host(t->buffer));
}

// Moves the pieces [from, to) of one tensor: out (tensor to state) or in.
void move_run(const std::vector<piece> & ps, size_t from, size_t to, bool out, int32_t mode, counts & n) {
    ggml_tensor * t = ps[from].tensor;
    size_t lo = SIZE_MAX, hi = 0, bytes = 0;
    for (size_t i = from; i < to; i++) {
        lo = std::min(lo, ps[i].offset);
        hi = std::max(hi, ps[i].offset + ps[i].size);
        bytes += ps[i].size;
    }
    n.pieces += to - from;
    if (to - from < 2 || !groups(t, mode) || hi - lo > bytes + (to - from) * SLACK_PER_PIECE) {
        for (size_t i = from; i < to; i++) {
            if (out) {
                ggml_backend_tensor_get(t, ps[i].host, ps[i].offset, ps[i].size);
            } else {
                ggml_backend_tensor_set(t, ps[i].host, ps[i].offset, ps[i].size);
            }
        }
        n.copies += to - from;
        return;
    }
    std::vector<uint8_t> span(hi - lo);
    ggml_backend_tensor_get(t, span.data(), lo, span.size());
    for (size_t i = from; i < to; i++) {
        uint8_t * at = span.data() + (ps[i].offset - lo);
        if (out) {
            std::memcpy(ps[i].host, at, ps[i].size);
        } else {
            std::memcpy(at, ps[i].host, ps[i].size);
        }
    }
    if (!out) {
        ggml_backend_tensor_set(t, span.data(), lo, span.size());
    }
    n.copies += out ? 1 : 2;
}

// Moves every piece, a run of one tensor's pieces at a time (the memory walk gives a tensor's
// pieces one after another).
counts move_all(const std::vector<piece> & ps, bool out, int32_t mode) {
    counts n;
    for (size_t i = 0; i < ps.size();) {
        size_t j = i + 1;
        while (j < ps.size() && ps[j].tensor == ps[i].tensor) {
            j++;
        }
        move_run(ps, i, j, out, mode, n);
        i = j;
    }
    return n;
}

// The state buffer, walked as llama.cpp's host writer and reader walk it; tensor pieces are
// kept for move_all.
class cursor {
public:
    cursor(uint8_t * p, size_t len) : ptr(p), left(len) {}

    uint8_t * take(size_t size) {
        if (size > left) {
            throw std::runtime_error("unexpectedly reached end of buffer");
        }
        uint8_t * at = ptr;
        ptr += size;
        left -= size;
        done += size;
        return at;
    }

    size_t done = 0;
    std::vector<piece> pieces;

private:
    uint8_t * ptr;
    size_t left;
};

class writer : public llama_io_write_i {
public:
    writer(uint8_t * p, size_t len) : c(p, len) {}
    void write(const void * src, size_t size) override { std::memcpy(c.take(size), src, size); }
    void write_tensor(ggml_tensor * t, size_t offset, size_t size) override {
        c.pieces.push_back({t, c.take(size), offset, size});
    }
    size_t n_bytes() override { return c.done; }
    cursor c;
};

class reader : public llama_io_read_i {
public:
    // The state is only read: the cursor's pointer is never written through.
    reader(const uint8_t * p, size_t len) : c(const_cast<uint8_t *>(p), len) {}
    void read(void * dst, size_t size) override { std::memcpy(dst, c.take(size), size); }
    void read_tensor(ggml_tensor * t, size_t offset, size_t size) override {
        c.pieces.push_back({t, c.take(size), offset, size});
    }
    size_t n_bytes() override { return c.done; }
    cursor c;
};

void report(const counts & n, size_t * copies, size_t * pieces) {
    if (copies) {
        *copies = n.copies;
    }
    if (pieces) {
        *pieces = n.pieces;
    }
}

// The context's memory, synchronized (a device's queued work done), or null.
llama_memory_t ready(llama_context * ctx, const void * buf) {
    llama_memory_t mem = ctx && buf ? llama_get_memory(ctx) : nullptr;
    if (mem) {
        llama_synchronize(ctx);
    }
    return mem;
}

}  // namespace

extern "C" size_t llb_shim_state_seq_get(struct llama_context * ctx, int32_t seq, uint8_t * dst, size_t size,
                                         int32_t mode, size_t * copies, size_t * pieces) {
    try {
        llama_memory_t mem = ready(ctx, dst);
        if (!mem) {
            return 0;
        }
        writer io(dst, size);
        io.write(&IO_MAGIC, sizeof(IO_MAGIC));
        io.write(&seq, sizeof(seq));
        mem->state_write(io, seq, 0);
        report(move_all(io.c.pieces, true, mode), copies, pieces);
        return io.n_bytes();
    } catch (...) {
        return 0;
    }
}

extern "C" size_t llb_shim_state_seq_set(struct llama_context * ctx, int32_t seq, const uint8_t * src, size_t size,
                                         int32_t mode, size_t * copies, size_t * pieces) {
    try {
        llama_memory_t mem = ready(ctx, src);
        if (!mem) {
            return 0;
        }
        reader io(src, size);
        uint32_t magic = 0;
        int32_t from = 0;
        io.read(&magic, sizeof(magic));
        if (magic != IO_MAGIC) {
            return 0;
        }
        io.read(&from, sizeof(from));
        // On a refused state llama.cpp empties the sequence and throws: no piece is moved.
        mem->state_read(io, seq, 0);
        report(move_all(io.c.pieces, false, mode), copies, pieces);
        return io.n_bytes();
    } catch (...) {
        return 0;
    }
}
