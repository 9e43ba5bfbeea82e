#!/usr/bin/env bash
# Every check of dashboards/, in one go:   bash dashboards/tests/run.sh
#
#   1. promtool check rules   alerts.rules.yaml is valid
#   2. promtool test rules    tests/alerts.test.yaml: each alert fires and stays quiet
#   3. check_dashboards.py    structure of the dashboard, rules, Grafana alerts, runbook
#   4. promql.py              every expression parses in a real Prometheus
#   5. e2e.py                 every expression returns series, the leak and
#                             node-down alerts fire, and a resigned and a lost
#                             leadership are counted, against the real agent on
#                             real masters under a small workload
#
# Python tools live in a venv under target/venv-dashboards (made once, reused;
# reinstalled when requirements.txt changes). Prometheus runs on a free loopback
# port with a throwaway data dir and no targets, and is stopped on exit.
# e2e.py starts its own redis-server masters, agent and Prometheus, and stops
# them itself; it needs target/debug/redlock-agent, built here when missing.
# Exits non-zero when any check fails.
set -euo pipefail

tests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dashboards="$(dirname "$tests")"
root="$(dirname "$dashboards")"
venv="$root/target/venv-dashboards"
py="$venv/bin/python"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# --- tools -------------------------------------------------------------------
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    echo "==> installing prometheus (promtool) with apt-get"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
    # The package may start a system Prometheus on :9090; these checks do not use it.
    command -v promtool >/dev/null && command -v prometheus >/dev/null ||
        { echo "promtool/prometheus still missing after apt-get install prometheus" >&2; exit 1; }
fi

if [ ! -x "$py" ]; then
    echo "==> creating $venv"
    python3 -m venv "$venv"
fi
stamp="$venv/.requirements.txt"
if ! cmp -s "$tests/requirements.txt" "$stamp"; then
    echo "==> installing $tests/requirements.txt"
    "$py" -m pip install --quiet --disable-pip-version-check -r "$tests/requirements.txt"
    cp "$tests/requirements.txt" "$stamp"
fi

# --- a Prometheus to ask -------------------------------------------------------
scratch="$(mktemp -d)"
prometheus_pid=""
cleanup() {
    if [ -n "$prometheus_pid" ]; then
        kill "$prometheus_pid" 2>/dev/null || true
        wait "$prometheus_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_prometheus() {
    local port deadline
    port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    echo "global: {}" >"$scratch/prometheus.yml"
    prometheus --config.file="$scratch/prometheus.yml" --storage.tsdb.path="$scratch/data" \
        --web.listen-address="127.0.0.1:$port" >"$scratch/prometheus.log" 2>&1 &
    prometheus_pid=$!
    prometheus_url="http://127.0.0.1:$port"
    deadline=$((SECONDS + 30))
    until "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
            "$prometheus_url/-/ready" 2>/dev/null; do
        if ! kill -0 "$prometheus_pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
            echo "prometheus did not become ready on $prometheus_url; its log:" >&2
            cat "$scratch/prometheus.log" >&2
            return 1
        fi
        sleep 0.2
    done
}

# --- checks --------------------------------------------------------------------
passed=()
failed=()
check() {
    local name="$1"
    shift
    echo "==> $name"
    if "$@"; then passed+=("$name"); else failed+=("$name"); fi
}

promql_parse_check() {
    start_prometheus && "$py" "$tests/promql.py" --url "$prometheus_url"
}

e2e_check() {
    local agent="$root/target/debug/redlock-agent"
    if [ ! -x "$agent" ]; then
        echo "==> building the agent: cargo build -p redlock-agent"
        (cd "$root" && cargo build -p redlock-agent) || return 1
    fi
    "$py" "$tests/e2e.py" --agent "$agent"
}

check "promtool check rules" promtool check rules "$dashboards/alerts.rules.yaml"
check "promtool test rules" promtool test rules "$tests/alerts.test.yaml"
check "check_dashboards.py" "$py" "$tests/check_dashboards.py"
check "promql parse check" promql_parse_check
check "e2e.py" e2e_check

total=$((${#passed[@]} + ${#failed[@]}))
if [ "${#failed[@]}" -eq 0 ]; then
    echo "dashboards: all $total checks passed"
else
    echo "dashboards: ${#failed[@]} of $total checks FAILED: $(IFS=,; echo "${failed[*]}")"
    exit 1
fi
