#!/usr/bin/env python3
"""llb's GPU kit driver: issue 41's table over the C ABI (ctypes), side by side with the feature
off and with llama-server from the same tree. Needs python3 only (no numpy, no pip packages).

  driver.py --lib libllb.so --server llama-server --big big.gguf --small small.gguf
            [--real real.gguf] [--cpu] [--small-sizes] [--only 012345]

Rows (docs/gpu.md, "The GPU kit"):
  (0) plain decode at T=0, one request at a time, both fixtures: ms per token, llb's whole,
      decode (llama_decode and its synchronize) and host (the rest), against llama-server
  (1) a pool of 64 and a pool of 8: three waves of the same 64 requests (T=0.7, 128 tokens; a shared
      system prompt and a user turn each),
      tok/s per wave, default config vs "prompt_cache": {"ram_bytes": 0}, and llama-server
      --parallel N; llb_pool_stats' cost_model after each pool run
  (2) one engine alternating two conversations with ~2,900-token system prompts: prompt ms per
      turn with the prompt cache and with ram_bytes 0
  (3) speculation (default) vs "speculative": false: a story at T=0.8, a pool of 8 where half
      the requests copy a passage (8 requests, then 40: 32 waiting for a lane at first), a
      random-weight small model's text
  (4) "repeat this passage": llb vs llama-server --spec-type each n-gram type, and none
  (5) the strict edit_file call copying a passage, speculation on vs off
Rows 3-5 copy text only with real weights (--real); on random weights they time the machinery.
KIT_CONFIG (JSON) is merged into every engine's and pool's config, KIT_REPS sets the repetitions.
llama-server gets each chat request rendered by its own /apply-template and generated with
/completion: its /v1/chat/completions answers HTTP 500 when it cannot parse a random-weight
model's text ("Failed to parse input").
"""
import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PASSAGE = (
    "The old lighthouse stood on the northern cliff for more than two hundred years. "
    "Every evening the keeper climbed the narrow stairs, trimmed the wick and polished the great lens until it shone. "
    "Ships that passed the rocks at night watched for the lighthouse and turned away from danger when they saw its beam. "
    "In winter the storms threw salt water against the windows of the lighthouse, and the keeper wrote each storm in his log. "
    "When the keeper grew old, his daughter learned to tend the light, and she kept the lighthouse burning through the longest nights. "
    "Today the lighthouse is a museum, but on clear evenings the lamp is still lit, and people walk up the cliff to watch it turn."
)

SYSTEM = (
    "You are a helpful assistant for a travel and lifestyle app. You can call tools to look up weather, "
    "book restaurants, convert currencies, set reminders, plan routes and search flights. Call a tool whenever "
    "it can answer the user's request; ask for missing details only when a required argument cannot be guessed. "
    "Answer briefly and politely, in the user's language. Never invent prices, times or availability: those come "
    "from tools. Dates are ISO 8601; times are 24-hour. When the user asks several things, call several tools."
)
USERS = [
    "What's the weather in Paris tomorrow?",
    "Book a table for two at an Italian place in Lyon tonight at 8.",
    "Convert 250 US dollars to euros.",
    "Remind me to call my mother at 6 pm.",
    "How long does it take to drive from Berlin to Munich?",
    "Find me a flight from Madrid to Rome next Friday.",
    "Translate 'good morning' into Japanese.",
    "What time is it in Tokyo right now?",
]


EVENT_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p, ctypes.c_void_p)


class Llb:
    """The C ABI: JSON strings in, heap JSON out (llb_string_free)."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        for name, res, args in [
            ("llb_version", ctypes.c_void_p, []),
            ("llb_devices", ctypes.c_void_p, []),
            ("llb_string_free", None, [ctypes.c_void_p]),
            ("llb_chat_create", ctypes.c_void_p, [ctypes.c_char_p, EVENT_FN, ctypes.c_void_p]),
            ("llb_chat_infer", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]),
            ("llb_chat_destroy", None, [ctypes.c_void_p]),
            ("llb_pool_create", ctypes.c_void_p, [ctypes.c_char_p, EVENT_FN, ctypes.c_void_p]),
            ("llb_pool_infer", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p, EVENT_FN, ctypes.c_void_p]),
            ("llb_pool_stats", ctypes.c_void_p, [ctypes.c_void_p]),
            ("llb_pool_destroy", None, [ctypes.c_void_p]),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib = lib
        self.no_event = EVENT_FN()  # NULL

    def take(self, p):
        s = ctypes.string_at(p).decode()
        self.lib.llb_string_free(p)
        return json.loads(s)

    def version(self):
        return self.take(self.lib.llb_version())

    def devices(self):
        return self.take(self.lib.llb_devices())

    def _create(self, fn, config):
        failures = []

        def on_event(ev, _ud):
            failures.append(ev.decode())
            return 0
        cb = EVENT_FN(on_event)
        h = fn(json.dumps(config).encode(), cb, None)
        if not h:
            raise RuntimeError("create failed: " + "; ".join(failures))
        return h, cb

    def engine(self, config):
        return Engine(self, *self._create(self.lib.llb_chat_create, config))

    def pool(self, config):
        h, _cb = self._create(self.lib.llb_pool_create, config)
        return Pool(self, h)


def completion(r):
    if "choices" not in r:
        raise RuntimeError("llb error: " + json.dumps(r)[:400])
    return r


class Engine:
    def __init__(self, llb, h, cb):
        self.llb, self.h, self.cb = llb, h, cb  # cb: must outlive the engine

    def infer(self, req):
        return completion(self.llb.take(self.llb.lib.llb_chat_infer(self.h, json.dumps(req).encode())))

    def close(self):
        self.llb.lib.llb_chat_destroy(self.h)
        self.h = None


class Pool:
    def __init__(self, llb, h):
        self.llb, self.h = llb, h

    def infer(self, req):
        p = self.llb.lib.llb_pool_infer(self.h, json.dumps(req).encode(), self.llb.no_event, None)
        return completion(self.llb.take(p))

    def stats(self):
        return self.llb.take(self.llb.lib.llb_pool_stats(self.h))

    def close(self):
        self.llb.lib.llb_pool_destroy(self.h)
        self.h = None


class Server:
    """llama-server from the kit's build on a free port; stopped by close()."""

    def __init__(self, binary, model, args, log):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(log, "ab")
        cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "--jinja"] + args
        self.log.write(("\n== " + " ".join(cmd) + "\n").encode())
        self.log.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.prompts = {}
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                self.close()
                raise RuntimeError(f"llama-server did not become healthy; see {log}")
            time.sleep(0.2)

    def post(self, path, body):
        q = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(q, timeout=900) as r:
            return json.loads(r.read())

    def complete(self, req):
        """The chat request as llama-server renders it (/apply-template), generated with /completion:
        the same prompt and sampling as /v1/chat/completions without parsing the reply, which
        fails (HTTP 500) on a random-weight model's text. Returns a chat-like result: usage and
        timings."""
        key = json.dumps(req["messages"])
        if key not in self.prompts:
            self.prompts[key] = self.post("/apply-template", {"messages": req["messages"]})["prompt"]
        body = {"prompt": self.prompts[key], "n_predict": req["max_tokens"], "temperature": req["temperature"],
                "cache_prompt": True}
        if "seed" in req:
            body["seed"] = req["seed"]
        try:
            r = self.post("/completion", body)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if e.code != 500 or "Failed to parse" not in text:
                raise
            # The reply was generated (a random-weight model does not stop early) and then refused
            # by llama-server's final parse: counted as max_tokens, and reported.
            return {"usage": {"completion_tokens": req["max_tokens"]}, "timings": None, "parse_failed": True}
        return {"usage": {"completion_tokens": r["timings"]["predicted_n"]}, "timings": r["timings"]}

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def parallel(n_threads, fn, items):
    """Runs fn(item) for each item on n_threads threads at once; (wall seconds, results)."""
    results = [None] * len(items)
    errors = []
    it = iter(range(len(items)))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(it, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except Exception as e:  # reported after the batch
                errors.append(e)
    t = time.time()
    ths = [threading.Thread(target=worker) for _ in range(n_threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]
    return time.time() - t, results


def tokens(r):
    return r["usage"]["completion_tokens"]


def tps(r):
    return r["timings"]["predicted_per_second"]


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "n/a"


class Kit:
    def __init__(self, a):
        self.a = a
        self.llb = Llb(a.lib)
        self.small_sizes = a.small_sizes
        self.reps = int(os.environ.get("KIT_REPS", "3"))
        self.threads = os.cpu_count() or 2
        self.log = os.path.join(os.path.dirname(os.path.abspath(a.lib)), "llama-server.log")
        self.spec_model = a.real or a.big
        self.spec_note = "real weights" if a.real else "RANDOM weights: nothing is copied, these time the machinery only"

    def base(self, model, **extra):
        c = {"model_path": model}
        if self.a.cpu:
            c["n_threads"] = self.threads
        c.update(extra)
        # KIT_CONFIG: JSON merged into every engine's and pool's config (a variant of the table).
        c.update(json.loads(os.environ.get("KIT_CONFIG", "{}")))
        return c

    def server_args(self, extra):
        return (["-ngl", "99", "-t", str(self.threads), "-tb", str(self.threads)]
                + os.environ.get("KIT_SERVER_ARGS", "").split() + extra)

    # (0) -------------------------------------------------------------------------------------
    def host(self):
        """Plain decode at T=0, one request at a time: llb's split of each token's time (decode_ms
        holds llama_decode and the synchronize after it, so predicted - decode is host work on an
        asynchronous backend too) against llama-server's time per token on the same prompt."""
        n = 32 if self.small_sizes else 128
        req = {"messages": [{"role": "user", "content": "Tell me about rivers."}], "temperature": 0, "max_tokens": n}
        print(f"\n(0) plain decode, T=0, {n} tokens, one request at a time: ms per token "
              "(llb: whole / decode+sync / host; llama-server: whole)")
        for model in [self.a.small, self.a.big]:
            e = self.llb.engine(self.base(model, n_ctx=2048))
            e.infer(dict(req, max_tokens=8))
            rows = []
            for _ in range(self.reps):
                t = e.infer(req)["timings"]
                k = max(1, t["predicted_n"])
                rows.append((t["predicted_ms"] / k, t["decode_ms"] / k))
            e.close()
            s = Server(self.a.server, model, self.server_args(["-c", "2048"]), self.log)
            try:
                s.complete(dict(req, max_tokens=8))
                peer = []
                for _ in range(self.reps):
                    t = s.complete(req)["timings"]
                    if t:
                        peer.append(t["predicted_ms"] / max(1, t["predicted_n"]))
            finally:
                s.close()
            whole = statistics.median(r[0] for r in rows)
            dec = statistics.median(r[1] for r in rows)
            peer_text = "n/a (its final parse refused every reply)"
            if peer:
                sp = statistics.median(peer)
                peer_text = f"{sp:6.3f}   llb tok/s / llama-server: {ratio(sp, whole)}"
            print(f"    {os.path.basename(model):<24} llb {whole:6.3f} / {dec:6.3f} / {whole - dec:6.3f}   "
                  f"llama-server {peer_text}")

    # (1) -------------------------------------------------------------------------------------
    def pools(self):
        sizes = [8, 2] if self.small_sizes else [64, 8]
        n_req = 8 if self.small_sizes else 64
        max_tokens = 16 if self.small_sizes else 128
        waves = 3

        def req(i):
            return {"messages": [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": f"{USERS[i % len(USERS)]} (request {i})"}],
                    "temperature": 0.7, "seed": i, "max_tokens": max_tokens}
        reqs = [req(i) for i in range(n_req)]
        print(f"\n(1) pools: {waves} waves of the same {n_req} requests (T=0.7, {max_tokens} tokens), "
              f"{os.path.basename(self.a.big)}; tok/s per wave")
        for n in sizes:
            got = {}
            for label, cache in [("default", None), ("ram_bytes 0", {"ram_bytes": 0})]:
                cfg = self.base(self.a.big, n_parallel=n)
                if cache is not None:
                    cfg["prompt_cache"] = cache
                t = time.time()
                pool = self.llb.pool(cfg)
                load = time.time() - t
                rates = []
                for _ in range(waves):
                    wall, rs = parallel(n_req, pool.infer, reqs)
                    rates.append(sum(map(tokens, rs)) / wall)
                stats = pool.stats()
                pool.close()
                got[label] = rates
                print(f"    llb pool {n:<2} {label:<12} " + "  ".join(f"{r:8.1f}" for r in rates) + f"   (load {load:.1f} s)")
                print(f"      cost_model: {json.dumps(stats.get('cost_model'), separators=(',', ':'))}")
            s = Server(self.a.server, self.a.big, self.server_args(["-np", str(n), "-c", str(4096 * n)]), self.log)
            try:
                peer, refused = [], 0
                for _ in range(waves):
                    wall, rs = parallel(n_req, s.complete, reqs)
                    peer.append(sum(map(tokens, rs)) / wall)
                    refused += sum(1 for r in rs if r.get("parse_failed"))
            finally:
                s.close()
            got["server"] = peer
            note = (f"   ({refused} of {waves * n_req} replies refused by its final parse, HTTP 500: counted as "
                    f"{max_tokens} tokens)") if refused else ""
            print(f"    llama-server -np {n:<2}    " + "  ".join(f"{r:8.1f}" for r in peer) + note)
            print(f"    pool {n}: llb default / ram_bytes 0 per wave: "
                  + "  ".join(ratio(x, y) for x, y in zip(got["default"], got["ram_bytes 0"]))
                  + ";  llb default / llama-server: "
                  + "  ".join(ratio(x, y) for x, y in zip(got["default"], peer)))

    # (2) -------------------------------------------------------------------------------------
    def alternating(self):
        n_tok = 600 if self.small_sizes else 2900
        turns = 3 if self.small_sizes else 4

        def system(topic):
            words = ["river", "market", "engine", "window", "garden", "letter", "station", "winter", "copper", "signal"]
            text, i = f"You are the {topic} assistant. ", len(topic)
            while len(text) < n_tok * 4:
                i = (i * 7 + 3) % 1000
                text += f"The {topic} {words[i % 10]} keeps rule {i} about the {words[(i // 10) % 10]}. "
            return {"role": "system", "content": text}

        def run(cache):
            cfg = self.base(self.a.big, n_ctx=4096)
            if cache is not None:
                cfg["prompt_cache"] = cache
            e = self.llb.engine(cfg)
            convs = [[system("harbor")], [system("orchard")]]
            rows = []
            for turn in range(turns):
                for c in convs:
                    c.append({"role": "user", "content": f"What is rule {turn}?"})
                    r = e.infer({"messages": c, "max_tokens": 16, "temperature": 0})
                    t = r["timings"]
                    rows.append((t["prompt_ms"], t["prompt_n"], t.get("cache_restored_n", 0)))
                    c.append({"role": "assistant", "content": r["choices"][0]["message"].get("content") or ""})
            e.close()
            return rows
        with_c, without = run(None), run({"ram_bytes": 0})
        print(f"\n(2) one engine (n_ctx 4096), two ~{n_tok}-token conversations alternating, {turns} turns each, "
              f"{os.path.basename(self.a.big)}: prompt ms per turn (tokens read / restored)")
        for k, (w, wo) in enumerate(zip(with_c, without)):
            print(f"    turn {k // 2 + 1} conv {'AB'[k % 2]}: cache {w[0]:8.1f} ms ({w[1]:>5} read, {w[2]:>5} restored)"
                  f"   ram_bytes 0 {wo[0]:8.1f} ms ({wo[1]:>5} read)   {ratio(w[0], wo[0])}")
        later_w = sum(w[0] for w in with_c[2:])
        later_wo = sum(w[0] for w in without[2:])
        print(f"    turns 2-{turns}: {later_w:.1f} ms with the cache, {later_wo:.1f} without: {ratio(later_w, later_wo)}")

    # (3)-(5) ---------------------------------------------------------------------------------
    def on_off(self, e, req):
        on, off, same, last = [], [], True, None
        # warm-up, both ways: an engine's first requests pay one-time costs
        e.infer(dict(req, max_tokens=8, speculative=True))
        e.infer(dict(req, max_tokens=8, speculative=False))
        for k in range(self.reps):
            # alternate which goes first, so neither always follows the other
            if k % 2 == 0:
                a = e.infer(dict(req, speculative=True))
                b = e.infer(dict(req, speculative=False))
            else:
                b = e.infer(dict(req, speculative=False))
                a = e.infer(dict(req, speculative=True))
            same &= message(a) == message(b)
            on.append(tps(a))
            off.append(tps(b))
            last = a
        return statistics.median(on), statistics.median(off), same, last

    def story(self, seed, max_tokens):
        return {"messages": [{"role": "user", "content": "Write a short story about a fox who learns to play the violin."}],
                "temperature": 0.8, "seed": seed, "max_tokens": max_tokens}

    def repeat_req(self, max_tokens):
        return {"messages": [{"role": "user", "content": f"Repeat the following text exactly.\n\n{PASSAGE}"}],
                "temperature": 0, "max_tokens": max_tokens}

    def speculation(self):
        mt = 32 if self.small_sizes else 200
        print(f"\n(3) speculation (default) vs \"speculative\": false, decode tok/s, medians of {self.reps}; "
              f"{os.path.basename(self.spec_model)} ({self.spec_note})")
        e = self.llb.engine(self.base(self.spec_model, n_ctx=4096))
        on, off, same, last = self.on_off(e, self.story(7, mt))
        print(f"    story T=0.8:            {on:8.1f} / {off:8.1f} = {ratio(on, off)}  identical: {same}; {drafts(last)}")
        e.close()
        n = 4 if self.small_sizes else 8

        def pool_run(spec, count):
            p = self.llb.pool(self.base(self.spec_model, n_parallel=n, n_ctx=2048 * n))
            reqs = [dict(self.repeat_req(mt + 100) if i % 2 == 0 else self.story(i, mt), speculative=spec)
                    for i in range(count)]
            wall, rs = parallel(count, p.infer, reqs)
            stats = p.stats()
            p.close()
            return sum(map(tokens, rs)) / wall, stats
        # n requests (none waits for a lane: the copying lanes' drafts pay only for their own rows),
        # then 5n (4n wait at first: a lane that ends sooner lets one in). Each repetition swaps
        # which of the two pools goes first.
        for count in (n, 5 * n):
            ons, offs = [], []
            for rep in range(self.reps):
                if rep % 2:
                    offs.append(pool_run(False, count)[0])
                r_on, st_on = pool_run(True, count)
                ons.append(r_on)
                if rep % 2 == 0:
                    r_off, st_off = pool_run(False, count)
                    offs.append(r_off)
            on, off = statistics.median(ons), statistics.median(offs)
            print(f"    pool of {n}, {count} requests, half copying: {on:8.1f} / {off:8.1f} tok/s overall = {ratio(on, off)}")
            print(f"      cost_model (on):  {json.dumps(st_on.get('cost_model'), separators=(',', ':'))}")
            print(f"      cost_model (off): {json.dumps(st_off.get('cost_model'), separators=(',', ':'))}")
        e = self.llb.engine(self.base(self.a.small, n_ctx=4096))
        on, off, same, last = self.on_off(e, self.story(7, mt))
        print(f"    random small model:     {on:8.1f} / {off:8.1f} = {ratio(on, off)}  identical: {same}; {drafts(last)}"
              f"  ({os.path.basename(self.a.small)})")
        e.close()

    def repeat(self):
        mt = 48 if self.small_sizes else 300
        req = self.repeat_req(mt)
        print(f"\n(4) \"repeat this passage\" (T=0, {mt} tokens), decode tok/s, medians of {self.reps}; "
              f"{os.path.basename(self.spec_model)} ({self.spec_note})")
        e = self.llb.engine(self.base(self.spec_model, n_ctx=4096))
        llb_on, llb_off, same, last = self.on_off(e, req)
        e.close()
        print(f"    llb speculation on / off: {llb_on:8.1f} / {llb_off:8.1f} = {ratio(llb_on, llb_off)}  identical: {same}; {drafts(last)}")
        best, best_name = 0.0, None
        for spec in [None, "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]:
            extra = ["-np", "1", "-c", "4096"] + (["--spec-type", spec] if spec else [])
            try:
                s = Server(self.a.server, self.spec_model, self.server_args(extra), self.log)
            except RuntimeError as err:
                print(f"    llama-server {spec}: {err}")
                continue
            try:
                s.complete(dict(req, max_tokens=4))  # warm-up, as llb's
                runs = [r for r in (s.complete(req) for _ in range(self.reps)) if r["timings"]]
            finally:
                s.close()
            if not runs:
                print(f"    llama-server {spec or '(no speculation)':<16} every reply refused by its final parse (HTTP 500)")
                continue
            t = statistics.median(tps(r) for r in runs)
            d = runs[-1].get("timings", {})
            extra_info = f"  drafted {d.get('draft_n', 0)}, accepted {d.get('draft_n_accepted', 0)}" if spec else ""
            print(f"    llama-server {spec or '(no speculation)':<16} {t:8.1f}   llb on / this: {ratio(llb_on, t)}{extra_info}")
            if spec and t > best:
                best, best_name = t, spec
        if best_name:
            print(f"    llb / best llama-server n-gram type ({best_name}): {ratio(llb_on, best)}")

    def edit(self):
        mt = 64 if self.small_sizes else 400
        req = {
            "messages": [{"role": "user", "content": f"{PASSAGE}\n\nReplace 'lighthouse' with 'beacon' in the whole text above."}],
            "tools": [{"type": "function", "function": {"name": "edit_file", "description": "Replace text in a file",
                       "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                                      "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"],
                                      "additionalProperties": False}}}],
            "tool_choice": "required", "temperature": 0, "max_tokens": mt}
        print(f"\n(5) strict edit_file call copying the passage (tool_choice required, T=0, {mt} tokens), decode tok/s, "
              f"medians of {self.reps}; {os.path.basename(self.spec_model)} ({self.spec_note})")
        e = self.llb.engine(self.base(self.spec_model, n_ctx=4096))
        on, off, same, last = self.on_off(e, req)
        e.close()
        print(f"    speculation on / off: {on:8.1f} / {off:8.1f} = {ratio(on, off)}  identical calls: {same}; {drafts(last)}")


def message(r):
    m = dict(r["choices"][0]["message"])
    if m.get("tool_calls"):
        m["tool_calls"] = [dict(c, id=None) for c in m["tool_calls"]]
    return m


def drafts(r):
    t = r["timings"]
    return f"{t['predicted_n']} tokens, {t.get('draft_n', 0)} drafted, {t.get('draft_accepted_n', 0)} accepted"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--big", required=True)
    ap.add_argument("--small", required=True)
    ap.add_argument("--real")
    ap.add_argument("--tree")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--small-sizes", action="store_true")
    ap.add_argument("--only", default=os.environ.get("KIT_ONLY", "012345"))
    a = ap.parse_args()
    kit = Kit(a)
    print(f"llb {kit.llb.version()}")
    print(f"devices {json.dumps(kit.llb.devices())}")
    print(f"ratios: llb / the same with the feature off, or llb / llama-server, same run (tok/s: higher is better; ms: lower)")
    t0 = time.time()
    failed = 0
    for key, fn in [("0", kit.host), ("1", kit.pools), ("2", kit.alternating), ("3", kit.speculation), ("4", kit.repeat), ("5", kit.edit)]:
        if key not in a.only:
            continue
        t = time.time()
        try:
            fn()
        except Exception as e:
            failed += 1
            print(f"    ({key}) FAILED: {type(e).__name__}: {e}")
        print(f"    [({key}) took {time.time() - t:.1f} s]")
        sys.stdout.flush()
    print(f"\ndriver: {time.time() - t0:.1f} s, {failed} section(s) failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
