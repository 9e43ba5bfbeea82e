#!/usr/bin/env bash
# Offline tests of the Helm chart in helm/redlock-agent: lint and render it
# with the real Helm engine, validate every manifest against the Kubernetes
# API schemas, and check the rendered agent config with `redlock-agent check`.
#
#   bash helm/tests/run.sh [pytest args...]
#
# Uses a throwaway venv in target/venv-helm (reused; reinstalled when
# requirements.txt changes). Builds target/debug/redlock-agent first, so
# the config check never runs a binary older than the chart's keys (cargo
# does nothing when it is up to date; HELM_TESTS_NO_BUILD=1 never builds).
# Exits non-zero when a test fails.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tests="$repo/helm/tests"
venv="$repo/target/venv-helm"
requirements="$tests/requirements.txt"

if [ ! -x "$venv/bin/python" ]; then
    echo "run.sh: creating $venv"
    python3 -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "run.sh: installing $requirements"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    echo "$want" >"$stamp"
fi

agent="$repo/target/debug/redlock-agent"
if [ -z "${HELM_TESTS_NO_BUILD:-}" ]; then
    echo "run.sh: building redlock-agent for the config check"
    if ! (cd "$repo" && cargo build -p redlock-agent); then
        echo "run.sh: WARNING: cargo build -p redlock-agent failed; the config check will be SKIPPED" >&2
    fi
fi
export REDLOCK_AGENT_BIN="${REDLOCK_AGENT_BIN:-$agent}"

export PYTHONDONTWRITEBYTECODE=1
cd "$tests"
# -rs lists every skip with its reason; no cache dir in the source tree.
exec "$venv/bin/python" -m pytest -p no:cacheprovider -rs "$@" "$tests"
