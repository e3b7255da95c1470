#!/usr/bin/env bash
# Soak test of the Java example server (issue 36): waves of overload for MINUTES minutes.
#
#   scripts/soak.sh MINUTES [MODEL.gguf]
#
# Runs bindings-java/run-example-server on MODEL (default: $LLB_SMOLLM2_TOOLS when set, else a
# random-weight fixture made with target/release/llb) with --parallel 2 --queue 4, then repeats a
# wave until the time is up. A wave sends, at once:
#   - 2 slow clients: streamed, read at 2 KB/s (max_tokens 48);
#   - 2 dropped streams: the client hangs up after 0.3 s, mid-stream;
#   - 2 cancellations: plain requests whose client gives up after 0.2 s;
#   - 3 streamed requests read to the end: 200 ends with [DONE], or 503;
#   - a burst of 12 plain requests (max_tokens 16): each is answered 200 with a finish_reason, or
#     refused 503 queue_full with Retry-After; nothing else.
# Odd waves send them in this order (the slow, dropped and cancelled ones get the places, the
# burst is refused), even waves in the reverse order (the burst gets the places).
# The server runs with a fixed, pre-touched 256 MB heap, so that RSS shows llb's and the
# server's own growth rather than the heap's first expansion. After 30 s of warm-up waves it
# samples RSS (/proc/PID/status VmRSS) and open descriptors (/proc/PID/fd) after every wave.
# At the end it prints the counts and the samples (first after warm-up, one a minute, last, max)
# and exits non-zero when an accepted request (other than the dropped ones) did not get a complete
# answer, a status other than 200/503 came back, the server died, RSS grew by more than
# SOAK_RSS_GROWTH_MB (default 96) from the first sample to the last, or the descriptors by more
# than SOAK_FD_GROWTH (default 8).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
minutes=${1:?usage: scripts/soak.sh MINUTES [MODEL.gguf]}
model=${2:-${LLB_SMOLLM2_TOOLS:-}}
rss_growth_mb=${SOAK_RSS_GROWTH_MB:-96}
fd_growth=${SOAK_FD_GROWTH:-8}

work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$model" ]; then
  model=$work/tools.gguf
  "$root/target/release/llb" fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --out "$model" >/dev/null
fi

# A bounded heap, so that RSS measures llb and the server rather than the heap's first growth.
JAVA_TOOL_OPTIONS="-Xms256m -Xmx256m -XX:+AlwaysPreTouch" "$root/bindings-java/run-example-server" --model "$model" \
  --port 0 --parallel 2 --queue 4 --threads 1 >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 1 600); do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\/v1\).*/\1/p' "$work/server.out")
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.err"; echo "soak: the server exited" >&2; exit 1; }
  sleep 0.2
done
[ -n "$url" ] || { echo "soak: the server did not start" >&2; exit 1; }
# run-example-server execs java: the PID is the JVM's.
echo "soak: server $url (pid $server_pid), model $(basename "$model"), $minutes min"

sample() { # rss_kb fds
  echo "$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status") $(ls "/proc/$server_pid/fd" | wc -l)"
}

body() { # max_tokens stream
  printf '{"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell me about wave %s."}],"max_tokens":%s,"stream":%s}' "$RANDOM" "$1" "$2"
}

# One request: kind, then curl options. Writes "kind code ok" to the wave's results.
request() {
  local kind=$1 max_tokens=$2 stream=$3; shift 3
  local out=$work/r.$BASHPID headers=$work/h.$BASHPID code
  code=$(curl -s -N -o "$out" -D "$headers" -w '%{http_code}' "$@" -H 'Content-Type: application/json' \
    -d "$(body "$max_tokens" "$stream")" "$url/chat/completions" || true)
  local ok=no
  case "$code" in
    200) if [ "$stream" = true ]; then grep -q '^data: \[DONE\]' "$out" && ok=yes
         else grep -q '"finish_reason":"\(length\|stop\)"' "$out" && ok=yes; fi ;;
    503) grep -qi '^retry-after: 1' "$headers" && grep -q '"code":"queue_full"' "$out" && ok=yes ;;
  esac
  echo "$kind $code $ok" >>"$work/results"
  rm -f "$out" "$headers"
}

specials() {
  for _ in 1 2; do request slow 48 true --limit-rate 2k & pids+=($!); done
  for _ in 1 2; do request dropped 400 true --max-time 0.3 & pids+=($!); done
  for _ in 1 2; do request cancelled 400 false --max-time 0.2 & pids+=($!); done
}
burst() {
  for _ in 1 2 3; do request stream 32 true & pids+=($!); done
  for _ in $(seq 1 12); do request burst 16 false & pids+=($!); done
}
wave() { # odd|even
  pids=()
  if [ "$1" = odd ]; then specials; sleep 0.05; burst; else burst; sleep 0.05; specials; fi
  wait "${pids[@]}"
}

: >"$work/results"
waves=0
alive() {
  kill -0 "$server_pid" 2>/dev/null || { echo "soak: the server died" >&2; tail -20 "$work/server.err" >&2; exit 1; }
}
# Warm-up: the JVM loads and compiles its code, llb fills its caches.
warm_end=$(( $(date +%s) + 30 ))
while [ "$(date +%s)" -lt "$warm_end" ]; do wave odd; wave even; alive; done
: >"$work/results"
start=$(date +%s)
end=$(( start + minutes * 60 ))
first=$(sample)
samples=("$first")
echo "  0 min: RSS $(( ${first% *} / 1024 )) MB, ${first#* } fds"
next_report=$(( start + 60 ))
while [ "$(date +%s)" -lt "$end" ]; do
  if [ $((waves % 2)) -eq 0 ]; then wave odd; else wave even; fi
  waves=$((waves + 1))
  alive
  s=$(sample)
  samples+=("$s")
  if [ "$(date +%s)" -ge "$next_report" ]; then
    echo "  $(( ($(date +%s) - start) / 60 )) min: RSS $(( ${s% *} / 1024 )) MB, ${s#* } fds, $waves waves"
    next_report=$(( next_report + 60 ))
  fi
done
last=$(sample)

read -r rss0 fd0 <<<"$first"
read -r rss1 fd1 <<<"$last"
rss_max=$(printf '%s\n' "${samples[@]}" | awk '$1 > m {m = $1} END {print m}')
fd_max=$(printf '%s\n' "${samples[@]}" | awk '$2 > m {m = $2} END {print m}')
echo "soak: $waves waves in $minutes min after 30 s of warm-up waves"
# Dropped and cancelled requests are cut by their clients on purpose (000: cut before the headers).
awk '{n[$1]++; c[$1 " " $2]++; if ($3 != "yes" && $1 != "dropped" && $1 != "cancelled") bad[$1 " " $2]++}
     END {for (k in n) printf "  %-9s %5d requests\n", k, n[k];
          for (k in c) printf "    %-13s %5d%s\n", k, c[k], (k in bad ? "  (" bad[k] " incomplete or malformed)" : "")}' \
  "$work/results" | sort
echo "  RSS: first $((rss0 / 1024)) MB, last $((rss1 / 1024)) MB, max $((rss_max / 1024)) MB"
echo "  open fds: first $fd0, last $fd1, max $fd_max"

fail=0
# Accepted and not dropped by its client: it must be complete. Dropped/cancelled ones may be cut.
bad=$(awk '($1 == "burst" || $1 == "stream" || $1 == "slow") && ($3 != "yes") {n++} END {print n + 0}' "$work/results")
odd=$(awk '($1 == "burst" || $1 == "stream" || $1 == "slow") && ($2 != "200" && $2 != "503") {n++} END {print n + 0}' "$work/results")
accepted=$(awk '$2 == "200" {n++} END {print n + 0}' "$work/results")
refused=$(awk '$2 == "503" {n++} END {print n + 0}' "$work/results")
echo "  accepted $accepted, refused $refused (503 queue_full), incomplete or malformed $bad, other statuses $odd"
[ "$bad" -eq 0 ] || { echo "soak: FAIL: $bad answers were incomplete or malformed" >&2; fail=1; }
[ "$odd" -eq 0 ] || { echo "soak: FAIL: $odd statuses other than 200/503" >&2; fail=1; }
[ $((rss1 - rss0)) -le $((rss_growth_mb * 1024)) ] \
  || { echo "soak: FAIL: RSS grew by $(((rss1 - rss0) / 1024)) MB (> $rss_growth_mb)" >&2; fail=1; }
[ $((fd1 - fd0)) -le "$fd_growth" ] || { echo "soak: FAIL: open fds grew by $((fd1 - fd0)) (> $fd_growth)" >&2; fail=1; }
[ "$fail" -eq 0 ] && echo "soak: OK"
exit "$fail"
