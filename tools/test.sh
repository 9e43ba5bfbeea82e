#!/usr/bin/env bash
# Installs what is missing and runs the whole test suite: the Rust tests
# (real redis-server masters), then every component's own test script.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/setup.sh
need_packages redis-server:redis-server promtool:prometheus tmux:tmux curl:curl \
  openssl:openssl python3:python3 node:nodejs
# The Go client is tested only where a Go toolchain is (Debian's golang-go
# installs in about 20 s); without one it is skipped, saying so.
need_packages go:golang-go || echo "golang-go could not be installed" >&2
# The JVM client builds with the JDK's own tools and tests with Debian's
# JUnit 5, which has no command to look for: its console launcher's jar
# (an empty command is never found, so ":junit5" installs it).
need_packages javac:openjdk-17-jdk-headless || echo "openjdk-17-jdk-headless could not be installed" >&2
[ -f /usr/share/java/junit-platform-console-standalone.jar ] ||
  need_packages :junit5 || echo "junit5 could not be installed" >&2

# Build every binary once, before any test runs (nextest and cargo test
# then build every test binary before running the first). The tests use
# these binaries and never run cargo themselves: they would wait on any
# other build's cargo locks with their timeouts running. A test that finds
# a binary missing or older than its sources fails at once, saying so.
# Each phase's start says how long the run has taken so far (bash's
# SECONDS), so a slow phase shows in the log.
phase() { echo "== $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }
phase build
cargo build --workspace --bins
# faults/tests/short.rs's quick control tests are left to the short mode
# below, which runs each of those controls (beside its run with the check
# on) and fails unless the checker finds the violation it plants.
if cargo nextest --version >/dev/null 2>&1; then
  phase "rust tests"
  cargo nextest run --workspace --no-fail-fast -E 'not (package(faults) and binary(short))'
else
  phase "rust tests"
  cargo test --workspace --no-fail-fast
fi

# The clients: the Rust crate's doc examples (nextest does not run
# doctests), then the Python, Node.js, Go and JVM clients' tests, each against a
# real agent on real masters (`redlock-agent dev`, built before the tests).
phase clients
cargo test -q --doc -p redlock-client
# The optional `opentelemetry` feature: the trace propagation test again,
# with the current OpenTelemetry context as the source.
cargo test -q -p redlock-client --features opentelemetry --test trace
target="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
export REDLOCK_AGENT="${target:-$PWD/target}/debug/redlock-agent"
# Python and Node.js are installed as a user installs them, then tested
# through the installed package: pip into a fresh venv (pip fetches the
# setuptools backend from PyPI), and npm pack + install of the tarball into
# a fresh project. `python3 -m venv` needs ensurepip, which Debian ships
# apart (python3-venv).
python3 -c 'import ensurepip' 2>/dev/null || need_packages "python3-venv-missing:python3-venv"
need_packages npm:npm
venv="${target:-$PWD/target}/clients-python-venv"
rm -rf "$venv" && python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check ./clients/python
# unasync is not the package's dependency: tests/test_generated.py uses it to
# check that the committed blocking client is what its generator writes.
"$venv/bin/pip" install --quiet --disable-pip-version-check unasync
# OpenTelemetry is optional for the client; its tracing tests need the API
# and the SDK, and skip, saying so, when PyPI cannot provide them.
"$venv/bin/pip" install --quiet --disable-pip-version-check opentelemetry-api opentelemetry-sdk ||
  echo "opentelemetry-api/-sdk could not be installed: the Python tracing tests are skipped" >&2
(cd clients/python && "$venv/bin/python" -m unittest discover -v -s tests -t tests 2>&1)
project="${target:-$PWD/target}/clients-node-project"
rm -rf "$project" && mkdir -p "$project" && cp -r clients/node/test "$project/"
(cd clients/node && npm pack --silent --pack-destination "$project" >/dev/null)
(cd "$project" && npm init -y >/dev/null &&
  npm install --silent --no-audit --no-fund ./redlock-agent-client-*.tgz &&
  # OpenTelemetry is an optional peer of the client; its tracing tests need
  # the API and a tracer, and skip, saying so, without them.
  { npm install --silent --no-audit --no-fund @opentelemetry/api @opentelemetry/sdk-trace-node ||
    echo "@opentelemetry/api could not be installed: the Node.js tracing tests are skipped" >&2; } &&
  node --test test/*.test.js test/*.test.mjs)
if command -v go >/dev/null 2>&1; then
  (cd clients/go && go vet ./... && go test -count=1 -v ./...)
else
  echo "go not found: the Go client was not built or tested (see clients/go/README.md)"
fi
if command -v javac >/dev/null 2>&1 && [ -f /usr/share/java/junit-platform-console-standalone.jar ]; then
  clients/java/build.sh
else
  echo "javac or JUnit 5 not found: the JVM client was not built or tested (see clients/java/README.md)"
fi

# The fault suite's short mode (nemesis over every fault, then the control
# run that must find violations), alone so the machine is quiet.
phase "faults: short mode"
cargo test -q -p faults --test short -- --ignored --nocapture

# Dashboards and alerts (promtool, a real Prometheus), then the Helm chart
# (the real Helm engine, Kubernetes schemas); each makes its own venv.
phase dashboards/tests/run.sh
bash dashboards/tests/run.sh
phase helm/tests/run.sh
bash helm/tests/run.sh
# The benchmark's smoke mode: it still runs; it measures nothing.
phase "bench/run.sh --smoke"
bash bench/run.sh --smoke
phase done
