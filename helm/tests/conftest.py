"""Shared helpers: the chart, its ci/ scenarios, and rendering through the
real Helm engine (helm-python-sdk embeds Helm's Go SDK; no cluster, no
helm binary)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import pytest
from helm_python import _native
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "redlock-agent"
SCENARIOS = sorted(CHART.glob("ci/*-values.yaml"))
RELEASE = "rl"
NAMESPACE = "locks"
FULLNAME = f"{RELEASE}-redlock-agent"

# Oldest Kubernetes with native sidecars on by default, and the newest the
# validator knows.
KUBE_VERSIONS = ("1.29.0", "1.37.0")


def scenario_id(path: Path) -> str:
    return path.name.removesuffix("-values.yaml")


def load_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


@dataclass
class Rendered:
    """One render: every manifest as a dict, plus NOTES.txt."""

    docs: list[dict[str, Any]]
    notes: str
    raw: dict[str, str] = field(repr=False)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert found, f"no {kind}/{name} rendered; have {self.names()}"
        assert len(found) == 1, f"{kind}/{name} rendered {len(found)} times"
        return found[0]

    def names(self) -> list[str]:
        return [f"{d['kind']}/{d['metadata']['name']}" for d in self.docs]

    def agent_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.agent_config_text())

    def agent_config_text(self) -> str:
        return self.get("ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"]


def render_chart(
    chart: helm_python.Chart,
    values: dict[str, Any] | None = None,
    *,
    kube_version: str = KUBE_VERSIONS[0],
    strict: bool = True,
) -> Rendered:
    """Render like `helm template --kube-version ... --strict`: a missing
    key in a template is an error, and .Capabilities names kube_version.

    Chart.render() of helm-python-sdk 0.2.2 does not pass these two options
    through, though its C ABI (helm_render) accepts them; so call it directly.
    """
    opts = {
        "name": RELEASE,
        "namespace": NAMESPACE,
        "is_install": True,
        "kube_version": f"v{kube_version}",
        "strict": strict,
    }
    raw: dict[str, str] = json.loads(
        _native.call_string(
            "helm_render",
            chart._raw(),
            json.dumps(values) if values else None,
            json.dumps(opts),
        )
    )
    docs: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(raw.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return Rendered(docs=docs, notes=notes, raw=raw)


@pytest.fixture(scope="session")
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


@pytest.fixture(scope="session")
def render(chart):
    def _render(values: dict[str, Any] | None = None) -> Rendered:
        return render_chart(chart, values)

    return _render


@pytest.fixture(scope="session")
def default(render) -> Rendered:
    return render()


def find_container(pod_spec: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """(where, container) for the container `name` in containers or initContainers."""
    for where in ("containers", "initContainers"):
        for c in pod_spec.get(where) or []:
            if c["name"] == name:
                return where, c
    raise AssertionError(f"no container {name!r} in the pod spec")


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]
