#!/usr/bin/env bash
# Makes docs/tui-locks.png and docs/tui-nodes.png from a real session: a dev
# agent on 5 masters with a few holds, redlock-tui in tmux, `capture-pane
# -e`, aha to HTML, headless Chromium to PNG. Needs tmux, aha, chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages tmux:tmux aha:aha chromium:chromium redis-server:redis-server curl:curl
cargo build --quiet -p redlock-agent -p redlock-tui
work=$(mktemp -d)
sock="$work/agent.sock"
tmux_() { tmux -S "$work/tmux" "$@"; }
cleanup() {
  tmux_ kill-server 2>/dev/null || true
  jobs -p | xargs -r kill 2>/dev/null || true
  [ -n "${agent:-}" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
target/debug/redlock-agent dev --socket "$sock" --metrics 127.0.0.1:0 >"$work/dev.out" 2>&1 &
agent=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
hold() { curl -sN --unix-socket "$sock" -X POST "localhost/v1/locks/$1/hold" -d "$2" >/dev/null & }
hold orders-42 '{"ttl_ms": 30000, "owner": "billing-worker-3"}'
hold nightly-report '{"ttl_ms": 60000, "owner": "cron@batch-1"}'
hold invoices%2F2026-11 '{"ttl_ms": 15000, "owner": "invoicer-7"}'
sleep 1  # the holds first, then two waiters queue behind orders-42
for _ in 1 2; do
  curl -s --unix-socket "$sock" -X POST localhost/v1/locks/orders-42/acquire -d '{"wait_ms": 60000}' >/dev/null &
done
# A lock left on two masters only (partial acquisition debris).
port=$(sed -n 's/.*ports \([0-9]*\), \([0-9]*\),.*/\1 \2/p' "$work/dev.out")
for p in $port; do redis-cli -p "$p" SET redlock:import-batch stale PX 45000 >/dev/null; done
tmux_ new-session -d -x 120 -y 32 "target/debug/redlock-tui --socket $work/admin.sock"
sleep 3
shot() {
  tmux_ capture-pane -e -p | aha --black --title redlock-tui >"$work/$1.html"
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/chrome" --hide-scrollbars --window-size=1100,620 \
    --screenshot="docs/$1.png" "file://$work/$1.html" 2>/dev/null
}
mkdir -p docs
tmux_ send-keys ':locks' Enter; sleep 1.5; shot tui-locks
# Restart one master: the agent quarantines it (delayed restart).
restart=$(echo $port | cut -d' ' -f2)
pid=$(pgrep -f "redis-server 127.0.0.1:$restart" || true)
[ -n "$pid" ] && kill -9 $pid && sleep 0.3 && (redis-server --port "$restart" --save "" --appendonly no --daemonize yes --dir "$work" >/dev/null)
tmux_ send-keys ':nodes' Enter; sleep 3; shot tui-nodes
[ -n "$pid" ] && redis-cli -p "$restart" shutdown nosave >/dev/null 2>&1 || true
echo "wrote docs/tui-locks.png docs/tui-nodes.png"
