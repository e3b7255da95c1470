#!/usr/bin/env python3
"""Random-weight GGUF fixtures for llb's GPU kit, with numpy and the tree's gguf-py only.

What `llb fixture` (src/fixture.rs) writes, in Python: the llama architecture, the qwen2
tokenizer copied from the tree's models/ggml-vocab-qwen2.gguf, the Qwen2.5 tool template, F16
weights whose values have magnitudes in [2^-7, 2^-3) with random signs and mantissas, norms of 1.
Random weights time the machinery; they do not copy text.

  mkfixture.py --tree llama.cpp small=small.gguf qwen1.5b=big.gguf
  (several fixtures in one run read the vocabulary once: gguf-py's reader takes seconds on it)
  shapes: qwen1.5b (Qwen2.5-1.5B: embd 1536, 28 layers, ff 8960, 12 heads, 2 KV heads; ~3.1 GB),
          small (embd 128, 2 layers, ff 256, 4 heads, 2 KV heads), mini (embd 256, 4 layers)
"""
import argparse
import os
import sys
import time
import types

SHAPES = {
    # n_embd, n_layer, n_ff, n_head, n_head_kv
    "qwen1.5b": (1536, 28, 8960, 12, 2),
    "mini": (256, 4, 768, 4, 2),
    "small": (128, 2, 256, 4, 2),
}


def import_gguf(tree):
    sys.path.insert(0, os.path.join(tree, "gguf-py"))
    # gguf/__init__ imports gguf.metadata, which imports yaml (model cards only): a machine with
    # python3 and numpy alone may not have it, and nothing here uses it.
    try:
        import yaml  # noqa: F401
    except ImportError:
        sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf
    return gguf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True, help="the pinned llama.cpp tree (gguf-py, models/)")
    ap.add_argument("fixtures", nargs="+", metavar="SHAPE=OUT", help="shapes: " + ", ".join(sorted(SHAPES)))
    ap.add_argument("--vocab", default="qwen2")
    ap.add_argument("--template", default="Qwen-Qwen2.5-7B-Instruct")
    ap.add_argument("--context-length", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    gguf = import_gguf(a.tree)
    import numpy as np

    t0 = time.time()
    todo = [f.split("=", 1) for f in a.fixtures]
    for shape, _ in todo:
        if shape not in SHAPES:
            ap.error(f"unknown shape {shape!r} (one of {', '.join(sorted(SHAPES))})")
    vocab = gguf.GGUFReader(os.path.join(a.tree, "models", f"ggml-vocab-{a.vocab}.gguf"))
    tokens = vocab.fields["tokenizer.ggml.tokens"]
    n_vocab = len(tokens.data)
    with open(os.path.join(a.tree, "models", "templates", a.template + ".jinja")) as f:
        template = f.read()
    print(f"mkfixture: read the {a.vocab} vocabulary ({n_vocab} tokens) in {time.time() - t0:.1f} s", flush=True)
    for shape, out in todo:
        write(gguf, np, vocab, n_vocab, template, a, shape, out)


def write(gguf, np, vocab, n_vocab, template, a, shape_name, out):
    t0 = time.time()
    n_embd, n_layer, n_ff, n_head, n_head_kv = SHAPES[shape_name]
    head = n_embd // n_head
    kv = head * n_head_kv

    tmp = out + ".partial"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"llb kit fixture ({a.vocab}, {shape_name})")
    w.add_file_type(1)
    w.add_context_length(a.context_length)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    # The tokenizer, minus any template the vocabulary carries: the template is set on purpose.
    for key, field in vocab.fields.items():
        if not key.startswith("tokenizer.") or key.startswith("tokenizer.chat_template"):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), vtype)
    w.add_chat_template(template)

    # (name, numpy shape (ggml dims reversed), kind)
    specs = [("token_embd.weight", (n_vocab, n_embd), "w"), ("output_norm.weight", (n_embd,), "norm")]
    for i in range(n_layer):
        p = f"blk.{i}."
        specs += [
            (p + "attn_norm.weight", (n_embd,), "norm"),
            (p + "attn_q.weight", (n_embd, n_embd), "w"),
            (p + "attn_k.weight", (kv, n_embd), "w"),
            (p + "attn_v.weight", (kv, n_embd), "w"),
            (p + "attn_output.weight", (n_embd, n_embd), "w"),
            (p + "ffn_norm.weight", (n_embd,), "norm"),
            (p + "ffn_gate.weight", (n_ff, n_embd), "w"),
            (p + "ffn_up.weight", (n_ff, n_embd), "w"),
            (p + "ffn_down.weight", (n_embd, n_ff), "w"),
        ]
    for name, shape, kind in specs:
        n = int(np.prod(shape))
        if kind == "norm":
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float16), n * 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    # One pool of random f16 bit patterns, read from a different offset for each tensor: the
    # weights need not be independent, and writing gigabytes must take seconds.
    rng = np.random.default_rng(a.seed)
    pool_n = 1 << 24
    r = rng.integers(0, 1 << 16, size=2 * pool_n, dtype=np.uint16)
    bits = (r & 0x83FF) | ((8 + ((r >> 10) & 3)) << 10)
    pool = bits.astype(np.uint16).view(np.float16)
    total = 0
    for k, (name, shape, kind) in enumerate(specs):
        n = int(np.prod(shape))
        if kind == "norm":
            data = np.ones(shape, dtype=np.float32)
        else:
            parts = []
            left, off = n, (k * 7919) % pool_n
            while left:
                take = min(left, pool_n)
                parts.append(pool[off:off + take])
                left -= take
                off = (off + 104729) % pool_n
            data = (np.concatenate(parts) if len(parts) > 1 else parts[0]).reshape(shape)
        w.write_tensor_data(data)
        total += data.nbytes
    w.close()
    os.replace(tmp, out)
    print(f"mkfixture: {out}: {shape_name}, {n_layer} layers, n_embd {n_embd}, {total / 1e9:.2f} GB of weights, "
          f"{time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
