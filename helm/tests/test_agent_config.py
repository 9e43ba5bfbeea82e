"""The config the chart renders is one the agent accepts: `redlock-agent check
--offline --config FILE` (exit 0, or every error and exit 64) on the
ConfigMap's config.yaml, for the defaults and each ci/ scenario. Offline:
the masters' names resolve only in the cluster, so the agent's comparison
of their addresses runs at start-up there, not here.

The binary is target/debug/redlock-agent (run.sh builds it when missing).
The password files and env vars the config names are recreated from the
pod spec, so the check also proves the config and the mounts agree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SCENARIOS, find_container, load_values, pod_spec, render_chart, scenario_id

AGENT = Path(os.environ.get("REDLOCK_AGENT_BIN", REPO / "target" / "debug" / "redlock-agent"))
EXIT_CONFIG = 64
FAKE_PASSWORD = "check-only-password"


def _agent_unusable_reason() -> str | None:
    """Why the agent binary cannot judge configs, or None if it can."""
    if not AGENT.is_file():
        return (
            f"{AGENT} does not exist: build it with `cargo build -p redlock-agent` "
            "(run.sh does, unless HELM_TESTS_NO_BUILD is set)"
        )
    probe = subprocess.run(
        [AGENT, "check", "--config", "/dev/null/not-a-file"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != EXIT_CONFIG:
        return (
            f"{AGENT} does not implement `check` yet: a missing config exited "
            f"{probe.returncode}, want {EXIT_CONFIG} (stale build? run.sh rebuilds it unless HELM_TESTS_NO_BUILD is set)"
        )
    return None


REASON = _agent_unusable_reason()
if REASON:
    print(f"\n!!!!! SKIPPING the redlock-agent config check: {REASON} !!!!!\n")

needs_agent = pytest.mark.skipif(REASON is not None, reason=f"LOUD SKIP: config not checked by the agent: {REASON}")


def materialize(rendered, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Write the rendered config.yaml for a local check: password_file paths
    are moved under tmp_path (after asserting the pod mounts a Secret key
    there), password_env vars are set (after asserting the agent container
    gets them from a Secret)."""
    import yaml

    config_text = rendered.agent_config_text()
    config = yaml.safe_load(config_text)
    env: dict[str, str] = {}
    # The agent's pod: the node mode's DaemonSet, else the demo's.
    workloads = rendered.of_kind("DaemonSet") or rendered.of_kind("Deployment")
    agent = None
    spec = None
    if workloads:
        spec = pod_spec(workloads[0])
        _, agent = find_container(spec, "redlock-agent")

    for master in config["masters"]:
        if "password_file" in master:
            path = master["password_file"]
            if agent is not None:
                mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
                directory, name = path.rsplit("/", 1)
                assert directory in mounts, f"{path}: its directory is not mounted in the agent"
                vol = next(v for v in spec["volumes"] if v["name"] == mounts[directory])
                paths = [i["path"] for s in vol["projected"]["sources"] for i in s["secret"]["items"]]
                assert name in paths, f"{path}: no Secret key projected as {name}"
            local = tmp_path / "secrets" / master["name"]
            local.parent.mkdir(exist_ok=True)
            local.write_text(FAKE_PASSWORD + "\n")
            master["password_file"] = str(local)
        if "password_env" in master:
            var = master["password_env"]
            if agent is not None:
                from_secret = [e["name"] for e in agent.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
                assert var in from_secret, f"{var}: not set from a Secret in the agent container"
            env[var] = FAKE_PASSWORD

    out = tmp_path / "config.yaml"
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out, env


@needs_agent
@pytest.mark.parametrize("scenario", [None, *SCENARIOS], ids=lambda p: "defaults" if p is None else scenario_id(p))
def test_rendered_config_passes_redlock_agent_check(chart, scenario, tmp_path):
    rendered = render_chart(chart, load_values(scenario) if scenario else None)
    config_file, env = materialize(rendered, tmp_path)
    result = subprocess.run(
        # --offline: the masters' names resolve only in the cluster.
        [AGENT, "check", "--offline", "--config", config_file],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, f"redlock-agent check refused the rendered config:\n{result.stderr}\n--- config:\n{rendered.agent_config_text()}"
    n = len(rendered.agent_config()["masters"])
    assert f"({n} masters, quorum {n // 2 + 1})" in result.stderr
    assert FAKE_PASSWORD not in result.stdout + result.stderr, "check printed a password"


@needs_agent
def test_agent_check_refuses_what_the_schema_lets_through(chart, tmp_path):
    """The agent is the last word on relations the schema cannot express
    (node_timeout at most a tenth of default_ttl); the chart passes them on
    untouched so the agent can refuse them at startup."""
    rendered = render_chart(chart, {"config": {"lock": {"defaultTtl": "100ms", "nodeTimeout": "50ms"}}})
    config_file, env = materialize(rendered, tmp_path)
    result = subprocess.run(
        # --offline: the masters' names resolve only in the cluster.
        [AGENT, "check", "--offline", "--config", config_file], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "lock.node_timeout" in result.stderr


def key_paths(tree, prefix=""):
    """Dotted paths of every mapping key; list items collapse to `[]`."""
    if isinstance(tree, dict):
        out = set()
        for key, value in tree.items():
            path = f"{prefix}.{key}" if prefix else key
            out |= {path} | key_paths(value, path)
        return out
    if isinstance(tree, list):
        out = set()
        for item in tree:
            out |= key_paths(item, f"{prefix}[]")
        return out
    return set()


def test_chart_config_covers_every_key_of_config_example(default):
    """The chart renders every key config.example.yaml documents, and none
    it does not, so a new agent setting cannot be forgotten here.
    (Per-master password_file/password_env are optional extras.)"""
    import yaml

    example = key_paths(yaml.safe_load((REPO / "config.example.yaml").read_text()))
    rendered = key_paths(default.agent_config()) - {"masters[].password_file", "masters[].password_env"}
    assert rendered == example, (
        f"only in config.example.yaml: {sorted(example - rendered)}; "
        f"only in the chart: {sorted(rendered - example)}"
    )
