"""Every rendered manifest, for the defaults and each ci/ scenario, against
the Kubernetes API schemas (kubernetes-validate, strict: unknown fields are
errors). The Prometheus Operator CRDs are not in those schemas; their shape
is checked here by hand."""

from __future__ import annotations

import re

import helm_python
import kubernetes_validate
import pytest

from conftest import KUBE_VERSIONS, SCENARIOS, load_values, render_chart, scenario_id

CRD_KINDS = {("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
KNOWN_KINDS = {
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("policy/v1", "PodDisruptionBudget"),
} | CRD_KINDS
PROM_DURATION = re.compile(r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture(scope="module", params=[None, *SCENARIOS], ids=lambda p: "defaults" if p is None else scenario_id(p))
def scenario_values(request):
    return load_values(request.param) if request.param else None


@pytest.fixture(scope="module")
def rendered(chart, scenario_values):
    return render_chart(chart, scenario_values)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(chart, scenario_values, kube_version):
    """Rendered for kube_version, each built-in kind validated strictly
    against that version's schemas; all errors reported at once."""
    rendered = render_chart(chart, scenario_values, kube_version=kube_version)
    errors = []
    for doc in rendered.docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message}")
    assert not errors, "\n".join(errors)


def test_only_expected_kinds_with_sane_metadata(rendered):
    """Known kinds only; names are DNS labels; everything is labelled with the release."""
    for doc in rendered.docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        assert (doc["apiVersion"], doc["kind"]) in KNOWN_KINDS, what
        assert DNS_LABEL.match(doc["metadata"]["name"]), f"{what}: not a DNS label"
        labels = doc["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/instance") == "rl", what
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", what
        assert doc["metadata"].get("namespace"), f"{what}: no namespace"
    names = rendered.names()
    assert len(names) == len(set(names)), f"duplicate resources: {names}"


def test_podmonitor_shape(rendered):
    """PodMonitor: the fields the Prometheus Operator reads, and nothing else."""
    for pm in rendered.of_kind("PodMonitor"):
        assert pm["apiVersion"] == "monitoring.coreos.com/v1"
        spec = pm["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel"}, spec.keys()
        assert spec["selector"]["matchLabels"], "empty selector would scrape every pod"
        ns_sel = spec.get("namespaceSelector", {})
        assert set(ns_sel) <= {"any", "matchNames"}, ns_sel
        assert spec["podMetricsEndpoints"], "no endpoints"
        for ep in spec["podMetricsEndpoints"]:
            assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "relabelings", "metricRelabelings", "scheme"}, ep.keys()
            assert isinstance(ep["port"], str) and len(ep["port"]) <= 15
            assert ep["path"].startswith("/")
            for key in ("interval", "scrapeTimeout"):
                if key in ep:
                    assert PROM_DURATION.match(ep[key]) and ep[key], f"{key}: {ep[key]!r}"
            for r in ep.get("relabelings", []):
                assert r["action"] in {"replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"}
                assert set(r) <= {"action", "sourceLabels", "separator", "targetLabel", "regex", "replacement", "modulus"}


def test_prometheusrule_shape(rendered):
    """PrometheusRule: groups of rules as Prometheus reads them, and alerts
    with severity, summary, description and runbook_url."""
    for pr in rendered.of_kind("PrometheusRule"):
        assert pr["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(pr["spec"]) == {"groups"}
        groups = pr["spec"]["groups"]
        assert groups, "no rule groups"
        assert len({g["name"] for g in groups}) == len(groups), "duplicate group names"
        for g in groups:
            assert set(g) <= {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset"}, g.keys()
            assert g["rules"], f"group {g['name']} has no rules"
            for rule in g["rules"]:
                assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}, rule.keys()
                assert ("alert" in rule) != ("record" in rule), rule
                assert isinstance(rule["expr"], str) and rule["expr"].strip()
                for key in ("for", "keep_firing_for"):
                    if key in rule:
                        assert PROM_DURATION.match(rule[key]), f"{key}: {rule[key]!r}"
                for key in ("labels", "annotations"):
                    assert all(isinstance(v, str) for v in (rule.get(key) or {}).values()), rule
                if "alert" in rule:
                    assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
                    for key in ("summary", "description", "runbook_url"):
                        assert rule["annotations"].get(key), f"{rule['alert']}: no {key}"


def test_native_sidecar_is_refused_before_kubernetes_1_29(chart):
    """On 1.28 the API server would drop restartPolicy and the agent would
    block the pod's start as a plain init container; say so instead."""
    with pytest.raises(helm_python.HelmError) as caught:
        render_chart(chart, None, kube_version="1.28.0")
    assert "sidecar.native: native sidecars" in str(caught.value)
    assert "set sidecar.native=false" in str(caught.value)


@pytest.mark.parametrize("kube_version", ["1.25.0", "1.28.0"])
def test_classic_sidecar_fits_older_kubernetes(chart, kube_version):
    """sidecar.native=false renders manifests valid on the chart's oldest kubeVersion."""
    rendered = render_chart(chart, {"sidecar": {"native": False}}, kube_version=kube_version)
    for doc in rendered.docs:
        kubernetes_validate.validate(doc, kube_version, strict=True)
