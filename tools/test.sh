#!/usr/bin/env bash
# Installs what is missing and runs the whole test suite: the Rust tests
# (real redis-server masters), then every component's own test script.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages redis-server:redis-server promtool:prometheus tmux:tmux curl:curl openssl:openssl

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi

# The fault suite's short mode (nemesis over every fault, then the control
# run that must find violations), alone so the machine is quiet.
echo "== faults: short mode"
cargo test -q -p faults --test short -- --ignored --nocapture

# Dashboards and alerts (promtool, a real Prometheus), then the Helm chart
# (the real Helm engine, Kubernetes schemas); each makes its own venv.
echo "== dashboards/tests/run.sh"
bash dashboards/tests/run.sh
echo "== helm/tests/run.sh"
bash helm/tests/run.sh
# The benchmark's smoke mode: it still runs; it measures nothing.
echo "== bench/run.sh --smoke"
bash bench/run.sh --smoke
