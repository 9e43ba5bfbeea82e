#!/usr/bin/env bash
# The benchmark: redlock-agent over its socket against the Redlock libraries
# an application would embed (rslock, redlock, node-redlock, pottery), on the
# same five local masters in one run. Installs what it needs. See README.md.
#
#   bench/run.sh             full run, about 10 minutes; the table is printed
#                            and written to bench/results/
#   bench/run.sh --smoke     a few seconds, the agent only; non-zero exit if
#                            the agent's driver fails (tools/test.sh runs it)
#   bench/run.sh --profile   perf profile and flame graph (SVG) of the agent
#                            under workload 1 at 64 clients, written to
#                            bench/results/
#
# Other arguments go to `redlock-bench run`, e.g. --duration 3s --warmup 500ms,
# --peers agent,rslock (node-redlock and pottery are installed only when
# they run) or --only w5 (the in-vote marker check's cost, agent only),
# --only w7 (a Python process per client: the agent and pottery), --only w8
# (10,000 idle connections, agent only), --only w9 (masters as Redis
# Clusters of 3 primaries beside single servers, agent only), --only w11
# (a permit cycle and a leadership hand-off beside a lock's, agent only),
# --only w13 (a lock on 3 resources at once beside 3 single locks, agent
# only), --only w14 (the CPU per cycle of the masters, the agent and the
# driver over 3, 5 and 7 masters, and the agent's overhead at 1,000
# cycles/s beside rslock's), --only w15 (a shared and an exclusive cycle
# beside a lock's, and 1, 8 and 64 readers on one resource, agent only).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
# One target directory with the workspace: the crates both use build once.
export CARGO_TARGET_DIR="$PWD/target"

smoke=false profile=false peers=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=true ;;
    --profile) profile=true ;;
    --peers=*) peers="${arg#--peers=}" ;;
  esac
  [ "$prev" = --peers ] && peers="$arg"
  prev="$arg"
done
# Whether a peer runs: every peer unless --peers names others.
runs() { [ -z "$peers" ] || [[ ",$peers," == *",$1,"* ]]; }

if $smoke; then
  # Debug builds: the smoke run checks that the benchmark still works, it
  # measures nothing. tools/test.sh has built the agent already. W7's agent
  # processes run under the system python3.
  need_packages redis-server:redis-server python3:python3
  cargo build --quiet -p redlock-agent
  cargo build --quiet --manifest-path bench/Cargo.toml
  exec target/debug/redlock-bench run --agent-bin target/debug/redlock-agent "$@"
fi

need_packages redis-server:redis-server redis-benchmark:redis-tools python3:python3
$profile && need_packages perf:linux-perf

drivers=()
if runs node-redlock; then
  need_packages node:nodejs npm:npm
  echo "== node-redlock (npm ci)" >&2
  if (cd bench/node && npm ci --no-audit --no-fund --loglevel=error >&2); then
    drivers+=(--node-driver bench/node/driver.mjs)
  else
    echo "npm ci failed: node-redlock will show as n/a" >&2
  fi
fi
if runs pottery; then
  need_packages python3:python3
  # python3-venv has no command of its own to look for; name one that is
  # never there when venv cannot work.
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_packages python3-venv-missing:python3-venv
  echo "== pottery (venv in bench/.venv)" >&2
  stamp=bench/.venv/requirements.txt
  if cmp -s bench/python/requirements.txt "$stamp" 2>/dev/null ||
    { python3 -m venv bench/.venv >&2 &&
      bench/.venv/bin/pip install --quiet --disable-pip-version-check -r bench/python/requirements.txt >&2 &&
      cp bench/python/requirements.txt "$stamp"; }; then
    drivers+=(--python bench/.venv/bin/python --python-driver bench/python/driver.py)
  else
    echo "pip install failed: pottery will show as n/a" >&2
  fi
fi

echo "== cargo build --release (the agent, then the benchmark with rslock and redlock)" >&2
cargo build --quiet --release -p redlock-agent
cargo build --quiet --release --manifest-path bench/Cargo.toml
exec target/release/redlock-bench run --agent-bin target/release/redlock-agent "${drivers[@]}" "$@"
