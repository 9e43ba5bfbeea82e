"""Monitoring objects: the chart's copies of the dashboard and the alert
rules are byte-identical to their sources in dashboards/ (Helm cannot read
files outside the chart), and what is rendered from them is their content."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import CHART, FULLNAME, REPO, find_container, pod_spec

COPIES = {
    "alerts.rules.yaml": REPO / "dashboards" / "alerts.rules.yaml",
    "redlock-agent.json": REPO / "dashboards" / "redlock-agent.json",
    "RUNBOOK.md": REPO / "dashboards" / "RUNBOOK.md",
}
ON = {"monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}}


def source_text(name: str) -> str:
    source = COPIES[name]
    if not source.is_file():
        pytest.fail(
            f"SOURCE MISSING: {source.relative_to(REPO)} does not exist (yet); the chart's copy "
            f"helm/redlock-agent/files/{name} cannot be checked against it"
        )
    return source.read_text()


@pytest.mark.parametrize("name", sorted(COPIES))
def test_chart_copy_is_byte_identical_to_its_source(name):
    source = COPIES[name]
    copy = CHART / "files" / name
    source_text(name)
    assert copy.is_file(), f"helm/redlock-agent/files/{name} is missing: cp {source.relative_to(REPO)} {copy.relative_to(REPO)}"
    assert copy.read_bytes() == source.read_bytes(), (
        f"helm/redlock-agent/files/{name} differs from {source.relative_to(REPO)}: "
        f"cp {source.relative_to(REPO)} {copy.relative_to(REPO)}"
    )


def chart_copy_text(name: str) -> str:
    copy = CHART / "files" / name
    if not copy.is_file():
        pytest.fail(f"helm/redlock-agent/files/{name} is missing: cp dashboards/{name} helm/redlock-agent/files/")
    return copy.read_text()


@pytest.fixture(scope="module")
def monitored(render):
    return render(ON)


def test_prometheusrule_carries_the_source_rules(monitored):
    source = yaml.safe_load(chart_copy_text("alerts.rules.yaml"))
    (rule,) = monitored.of_kind("PrometheusRule")
    assert rule["metadata"]["name"] == FULLNAME
    assert rule["spec"]["groups"] == source["groups"]


def test_runbook_urls_point_at_the_shipped_runbook_or_the_configured_base(monitored, render):
    runbook = chart_copy_text("RUNBOOK.md")
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    (rule,) = monitored.of_kind("PrometheusRule")
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        assert url == f"RUNBOOK.md#{alert['alert'].lower()}", url
        assert url.split("#")[1] in anchors, f"{url}: no such heading in files/RUNBOOK.md"
    based = render({**ON, "monitoring": {**ON["monitoring"], "runbookBaseUrl": "https://wiki.example/redlock/"}})
    (rule,) = based.of_kind("PrometheusRule")
    for group in rule["spec"]["groups"]:
        for alert in (r for r in group["rules"] if "alert" in r):
            assert alert["annotations"]["runbook_url"] == (
                f"https://wiki.example/redlock/RUNBOOK.md#{alert['alert'].lower()}"
            )


def test_dashboard_configmap_carries_the_source_json(monitored):
    source = chart_copy_text("redlock-agent.json")
    cm = monitored.get("ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {"redlock-agent.json": source}, "the dashboard JSON changed on its way into the ConfigMap"
    assert json.loads(cm["data"]["redlock-agent.json"]).get("uid"), "dashboard without a stable uid"


def test_dashboard_can_go_to_grafanas_namespace(render):
    cm = render({"monitoring": {"dashboard": {"enabled": True, "namespace": "monitoring"}}}).get(
        "ConfigMap", f"{FULLNAME}-dashboard"
    )
    assert cm["metadata"]["namespace"] == "monitoring"


def test_podmonitor_scrapes_the_sidecars_under_the_alerts_job(monitored):
    """The PodMonitor selects the demo's pods, scrapes the agent's metrics
    port, and names the job the way the alert expressions select it."""
    (pm,) = monitored.of_kind("PodMonitor")
    demo = monitored.get("Deployment", f"{FULLNAME}-demo")
    pod_labels = demo["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    _, agent = find_container(pod_spec(demo), "redlock-agent")
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in agent["ports"]}
    assert endpoint["path"] == "/metrics"
    jobs_in_alerts = set(re.findall(r'job="([^"]+)"', chart_copy_text("alerts.rules.yaml")))
    (job_relabel,) = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert jobs_in_alerts == {job_relabel["replacement"]}


def test_monitoring_is_off_by_default(default):
    assert not default.of_kind("PodMonitor")
    assert not default.of_kind("PrometheusRule")
    assert f"ConfigMap/{FULLNAME}-dashboard" not in default.names()
