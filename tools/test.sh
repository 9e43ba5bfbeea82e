#!/usr/bin/env bash
# Installs what is missing and runs the whole test suite: the Rust tests
# (real redis-server masters), then every component's own test script.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages redis-server:redis-server promtool:prometheus tmux:tmux curl:curl

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi

for suite in dashboards/tests/run.sh helm/tests/run.sh; do
  if [ -f "$suite" ]; then
    echo "== $suite"
    bash "$suite"
  fi
done
