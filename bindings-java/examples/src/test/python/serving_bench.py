#!/usr/bin/env python3
"""N simultaneous tool-calling conversations against an OpenAI-compatible server, cold then warm:
the workload of examples/bench_serving.rs (same system prompt, 6 tools, 8 user turns,
tool_choice auto, max_tokens 96, temperature 0, streamed), sent over HTTP so that it measures a
server (the Java example server or llama-server) as a client sees it. Standard library only.

    serving_bench.py BASE_URL [N]      # BASE_URL like http://127.0.0.1:8080/v1; prints one JSON line
"""
import http.client, json, sys, threading, time, urllib.parse

MAX_TOKENS = 96
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
SYSTEM = ("You are a helpful assistant for a travel and lifestyle app. You can call tools to "
    "look up weather, book restaurants, convert currencies, set reminders, plan routes and search "
    "flights. Call a tool whenever it can answer the user's request; ask for missing details only "
    "when a required argument cannot be guessed. Answer briefly and politely, in the user's language. "
    "Never invent prices, times or availability: those come from tools. Dates are ISO 8601; times "
    "are 24-hour. When the user asks several things, call several tools.")


def f(name, desc, props, req):
    return {"type": "function", "function": {"name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": req}}}


TOOLS = [
    f("get_weather", "Get the current weather or the forecast for a city. Use for any question about "
      "temperature, rain, wind or sunshine.",
      {"city": {"type": "string", "description": "City name"},
       "date": {"type": "string", "description": "ISO date, default today"},
       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    f("book_restaurant", "Reserve a table at a restaurant.",
      {"city": {"type": "string"}, "cuisine": {"type": "string"},
       "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
       "time": {"type": "string", "description": "HH:MM, 24h"}}, ["city", "party_size", "time"]),
    f("convert_currency", "Convert an amount between currencies at today's rate.",
      {"amount": {"type": "number"}, "from": {"type": "string", "description": "ISO 4217 code"},
       "to": {"type": "string", "description": "ISO 4217 code"}}, ["amount", "from", "to"]),
    f("set_reminder", "Create a reminder that notifies the user at a given time.",
      {"text": {"type": "string"}, "time": {"type": "string", "description": "ISO date-time"}}, ["text", "time"]),
    f("get_route", "Driving, walking or transit route between two places with duration.",
      {"from": {"type": "string"}, "to": {"type": "string"},
       "mode": {"type": "string", "enum": ["driving", "walking", "transit"]}}, ["from", "to"]),
    f("search_flights", "Search flights between two airports or cities on a date.",
      {"from": {"type": "string"}, "to": {"type": "string"}, "date": {"type": "string"},
       "passengers": {"type": "integer", "minimum": 1}}, ["from", "to", "date"]),
]


def request(i):
    return {"model": "m", "messages": [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{USERS[i % len(USERS)]} (request {i})"}],
            "tools": TOOLS, "tool_choice": "auto", "max_tokens": MAX_TOKENS, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}


def one(base, i, out):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t = time.monotonic()
    conn.request("POST", u.path + "/chat/completions", json.dumps(request(i)), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read())
    ttft, tokens = None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
        if ttft is None and any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls")):
            ttft = time.monotonic() - t
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    out[i] = (ttft if ttft is not None else time.monotonic() - t, tokens, time.monotonic() - t)


def batch(base, n):
    out = [None] * n
    t = time.monotonic()
    threads = [threading.Thread(target=one, args=(base, i, out)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t
    tokens = sum(o[1] for o in out)
    lat = [o[2] for o in out]
    return {"wall": round(wall, 3), "tokens": tokens, "tok_s": round(tokens / wall, 1),
            "ttft_mean": round(sum(o[0] for o in out) / n, 3),
            "latency_mean": round(sum(lat) / n, 3), "latency_max": round(max(lat), 3)}


if __name__ == "__main__":
    base = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    print(json.dumps({"n": n, "cold": batch(base, n), "warm": batch(base, n)}))
