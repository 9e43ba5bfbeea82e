"""`helm lint --strict` through the real Helm engine, for the defaults and
every ci/ scenario (values schema included)."""

from __future__ import annotations

import helm_python
import pytest

from conftest import CHART, KUBE_VERSIONS, SCENARIOS, load_values, scenario_id

SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


def problems(report: dict) -> list[str]:
    found = [
        f"{SEVERITY.get(m['severity'], m['severity'])} {m['path']}: {m['error']}"
        for m in report["messages"]
        if m["severity"] >= 2
    ]
    return found + list(report.get("errors") or [])


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_chart_lints_strict_with_defaults(kube_version):
    """The defaults lint clean (warnings count as errors)."""
    report = helm_python.lint(CHART, strict=True, kube_version=f"v{kube_version}")
    assert report["total_charts_linted"] == 1
    assert not problems(report), "\n".join(problems(report))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_chart_lints_strict_with_each_ci_scenario(scenario):
    """Each ci/*-values.yaml lints clean and passes values.schema.json."""
    report = helm_python.lint(
        CHART, load_values(scenario), strict=True, kube_version=f"v{KUBE_VERSIONS[0]}"
    )
    assert not problems(report), "\n".join(problems(report))


def test_lint_reports_schema_violations():
    """Lint is not blind to the schema: an even master count is an error."""
    report = helm_python.lint(CHART, {"masters": {"count": 4}}, strict=True)
    assert any("/masters/count" in p for p in problems(report)), problems(report)


def test_the_ci_scenarios_the_brief_asks_for_exist():
    """defaults, external masters, cluster masters, classic sidecar, monitoring, existing secret, node mode."""
    have = {scenario_id(p) for p in SCENARIOS}
    want = {"default", "external-masters", "cluster-masters", "classic-sidecar", "monitoring", "existing-secret", "node"}
    assert want <= have, f"missing ci scenarios: {sorted(want - have)}"
