#!/usr/bin/env bash
# The agent's own instructions per acquire + release cycle (workload 1,
# distinct keys), counted by valgrind's callgrind: user space only, and the
# same on a busy machine as on a quiet one, where cycles/s and CPU seconds
# are not. For comparing two builds of the agent, or a build against itself
# after a change, to a few percent; not a throughput figure (under valgrind
# the agent runs about 50 times slower, so batches are larger than in
# bench/run.sh).
#
#   bench/instructions.sh                     the working tree's release build
#   bench/instructions.sh A B ...             these agent binaries, in turn
#   CLIENTS="1 64" SECONDS_MEASURED=15 bench/instructions.sh ...
#   TRACED=1 bench/instructions.sh ...        every request traced
#                                             (`tracing.sample_ratio: 1.0`)
#                                             and exported to a receiver
#                                             that answers 200, as W12's
#
# For each binary and client count: the cycles counted, the instructions
# (Ir) per cycle (less the agent's idle background work, measured first
# for 5 s), that idle rate, the lock commands per script call (at 64
# clients the count per cycle falls as batches grow, and they grow when
# the agent gets less of the machine: compare counts at like batch sizes),
# and the callgrind file (in bench/results/scratch/) for
# `callgrind_annotate --inclusive=yes FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
export CARGO_TARGET_DIR="$PWD/target"
need_packages redis-server:redis-server valgrind:valgrind python3:python3 curl:curl

clients=${CLIENTS:-"1 64"}
measured=${SECONDS_MEASURED:-15}
cargo build --quiet --release --manifest-path bench/Cargo.toml
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  cargo build --quiet --release -p redlock-agent
  bins=(target/release/redlock-agent)
fi

work=$(mktemp -d)
out=bench/results/scratch
mkdir -p "$out"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # The masters may still be writing their logs as they exit.
  sleep 0.5
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

masters_yaml="" masters_json=""
for i in 1 2 3 4 5; do
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --logfile "$work/r$i.log" --pidfile "$work/r$i.pid" --daemonize yes >/dev/null
  for _ in $(seq 50); do [ -s "$work/r$i.pid" ] && break; sleep 0.1; done
  pids+=("$(cat "$work/r$i.pid")")
  masters_yaml+="  - {name: r$i, url: \"redis://127.0.0.1:$port\"}"$'\n'
  masters_json+="\"redis://127.0.0.1:$port\","
done
masters_json="[${masters_json%,}]"

metrics_port=$(free_port)
tracing_yaml=""
if [ "${TRACED:-0}" = 1 ]; then
  # An OTLP/HTTP receiver that reads each export and answers 200.
  otlp_port=$(free_port)
  python3 - "$otlp_port" <<'PY' &
import http.server, sys
class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver).serve_forever()
PY
  pids+=("$!")
  tracing_yaml="tracing: {otlp_endpoint: \"http://127.0.0.1:$otlp_port\", sample_ratio: 1.0}"
fi
# Lock requests answered (the cycles counted between zeroing and dumping),
# script calls and the commands in them, every master's.
counters() {
  curl -sf "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^redlock_api_requests_total/ && /route="acquire"/ {a += $2}
         /^redlock_node_batch_commands_count/ {c += $2}
         /^redlock_node_batch_commands_sum/ {s += $2}
         END {printf "%d %d %d\n", a, c, s}'
}

# The newest dump (callgrind numbers them cg.out.1, cg.out.2, ...).
dumped() { ls -t "$work"/cg.out.* | head -1; }
# The instructions in a callgrind file.
total() { callgrind_annotate "$1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }

printf '%-40s %7s %8s %12s %14s %14s\n' agent clients cycles "Ir/cycle" "idle Ir/s" "commands/call"
for bin in "${bins[@]}"; do
  for n in $clients; do
    # Timeouts far above what valgrind's slowness needs: a slow vote must
    # not look like a failed one.
    cat >"$work/agent.yaml" <<YAML
socket: {path: "$work/agent.sock", request_timeout: 60s}
metrics: {listen: "127.0.0.1:$metrics_port"}
log: {level: warn}
masters:
$masters_yaml
lock: {default_ttl: 60s, max_ttl: 120s, node_timeout: 3s, retry_delay: 50ms, retry_jitter: 50ms}
delayed_restart: {enabled: false}
leak_scan: {interval: 1h}
$tracing_yaml
YAML
    rm -f "$work/agent.sock" "$work"/cg.out*
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
      "$bin" --config "$work/agent.yaml" >"$work/agent.log" 2>&1 &
    agent=$!
    pids+=("$agent")
    for _ in $(seq 600); do [ -S "$work/agent.sock" ] && break; sleep 0.1; done
    [ -S "$work/agent.sock" ] || { cat "$work/agent.log" >&2; exit 1; }
    # The agent's own background work (probes, timers), per second without
    # a client, is taken off the count: under valgrind it is a few percent
    # of a loaded second, and it would move with the cycles/s.
    sleep 3
    callgrind_control --zero "$agent" >/dev/null 2>&1
    idle_start=$(date +%s.%N)
    sleep 5
    callgrind_control --dump "$agent" >/dev/null 2>&1
    idle_per_s=$(python3 -c "print($(total "$(dumped)") / ($(date +%s.%N) - $idle_start))")
    spec="{\"peer\":\"agent\",\"masters\":$masters_json,\"socket\":\"$work/agent.sock\",\"keys\":\"distinct\",\"clients\":$n,\"warmup_ms\":0,\"duration_ms\":$(((measured + 10) * 1000)),\"ttl_ms\":60000,\"resource_prefix\":\"ir$n\",\"tuned\":false}"
    target/release/redlock-bench drive "$spec" >"$work/driver.json" 2>"$work/driver.err" &
    driver=$!
    # Warm-up: connections open, scripts loaded, allocator pages touched.
    sleep 5
    read -r a0 calls0 commands0 < <(counters)
    callgrind_control --zero "$agent" >/dev/null 2>&1
    start=$(date +%s.%N)
    sleep "$measured"
    callgrind_control --dump "$agent" >/dev/null 2>&1
    took=$(python3 -c "print($(date +%s.%N) - $start)")
    read -r a1 calls1 commands1 < <(counters)
    wait "$driver" || { cat "$work/driver.err" >&2; exit 1; }
    kill "$agent"
    wait "$agent" 2>/dev/null || true
    cycles=$((a1 - a0))
    [ "$cycles" -gt 0 ] || { echo "no cycles counted for $bin at $n clients" >&2; exit 1; }
    ir=$(total "$(dumped)")
    kept="$out/callgrind-$(basename "$bin")-$n.out"
    cp "$(dumped)" "$kept"
    per_cycle=$(python3 -c "print(round(($ir - $idle_per_s * $took) / $cycles))")
    per_call=$(python3 -c "print(round(($commands1 - $commands0) / max(1, $calls1 - $calls0), 1))")
    printf '%-40s %7s %8s %12s %14.0f %14s\n' "$bin" "$n" "$cycles" "$per_cycle" "$idle_per_s" "$per_call"
  done
done
