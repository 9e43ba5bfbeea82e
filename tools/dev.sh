#!/usr/bin/env bash
# Installs what is missing, builds, and runs the agent on 5 real local
# masters (redlock-agent dev) with its socket at ./redlock.sock and its
# admin socket (force release, redlock-tui) at ./redlock-admin.sock.
# Extra arguments go to `redlock-agent dev` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages redis-server:redis-server curl:curl
cargo build --quiet -p redlock-agent
exec target/debug/redlock-agent dev "$@"
