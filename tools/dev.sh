#!/usr/bin/env bash
# Installs what is missing, builds the agent and the TUI, and runs the agent
# on 5 real local masters (redlock-agent dev) with its socket at
# ./redlock.sock. It prints commands to try, with full paths.
# Extra arguments go to `redlock-agent dev` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages redis-server:redis-server curl:curl
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust $(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml) or newer with" >&2
  echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y && . \"\$HOME/.cargo/env\"" >&2
  exit 1
fi
echo "building redlock-agent and redlock-tui (the first build takes a few minutes)..." >&2
cargo build --quiet -p redlock-agent -p redlock-tui
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
exec "${target:-target}/debug/redlock-agent" dev "$@"
