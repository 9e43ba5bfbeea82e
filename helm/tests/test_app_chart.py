"""The sidecar templates from an application chart's point of view: a
throwaway app chart depends on redlock-agent under an alias and puts the
agent into its own pod spec with the "redlock-agent.sidecar.*" templates,
exactly as templates/_sidecar.tpl documents."""

from __future__ import annotations

import shutil
import textwrap

import helm_python
import kubernetes_validate
import pytest
import yaml

from conftest import CHART, KUBE_VERSIONS, find_container, pod_spec

APP_DEPLOYMENT = """\
{{- $rl := dict "context" $ "values" .Values.redlock "chartName" "redlock" }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-shop
spec:
  selector:
    matchLabels:
      app: shop
  template:
    metadata:
      labels:
        app: shop
        {{- include "redlock-agent.sidecar.podLabels" $rl | nindent 8 }}
      annotations:
        {{- include "redlock-agent.sidecar.podAnnotations" $rl | nindent 8 }}
    spec:
      securityContext:
        fsGroup: 65532
      {{- if include "redlock-agent.sidecar.native" $rl }}
      initContainers:
        {{- include "redlock-agent.sidecar.initContainers" $rl | nindent 8 }}
      {{- end }}
      containers:
        - name: shop
          image: shop:1.0
          env:
            {{- include "redlock-agent.sidecar.appEnv" $rl | nindent 12 }}
          volumeMounts:
            {{- include "redlock-agent.sidecar.socketVolumeMount" $rl | nindent 12 }}
        {{- if not (include "redlock-agent.sidecar.native" $rl) }}
        {{- include "redlock-agent.sidecar.containers" $rl | nindent 8 }}
        {{- end }}
      volumes:
        {{- include "redlock-agent.sidecar.volumes" $rl | nindent 8 }}
"""


@pytest.fixture(scope="module")
def app_chart(tmp_path_factory):
    root = tmp_path_factory.mktemp("app") / "shop"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: v2
            name: shop
            version: 1.0.0
            appVersion: "9.9.9"
            dependencies:
              - name: redlock-agent
                version: 0.1.0
                alias: redlock
            """
        )
    )
    (root / "values.yaml").write_text("redlock:\n  demo:\n    enabled: false\n  masters:\n    count: 3\n")
    (root / "templates" / "deployment.yaml").write_text(APP_DEPLOYMENT)
    shutil.copytree(CHART, root / "charts" / "redlock-agent")
    with helm_python.Chart.load(root) as chart:
        yield chart


def render_app(chart, values=None):
    raw = chart.render(values, name="shop", namespace="shop")
    docs = []
    for path, text in raw.items():
        if not path.endswith("NOTES.txt"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_app_chart_embeds_the_sidecar(app_chart, native):
    docs = render_app(app_chart, {"redlock": {"sidecar": {"native": native}}})
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    shop = by_name[("Deployment", "shop-shop")]
    spec = pod_spec(shop)

    where, agent = find_container(spec, "redlock-agent")
    assert where == ("initContainers" if native else "containers")
    _, app = find_container(spec, "shop")
    assert {e["name"]: e["value"] for e in app["env"]}["REDLOCK_SOCKET"] == "/run/redlock/agent.sock"
    # The admin socket's volume is the agent's alone.
    assert any(m["name"] == "redlock-admin" for m in agent["volumeMounts"])
    assert all(m["name"] != "redlock-admin" for m in app.get("volumeMounts", []))

    # The names the sidecar refers to are the ones the dependency rendered.
    volumes = {v["name"]: v for v in spec["volumes"]}
    config_name = volumes["redlock-config"]["configMap"]["name"]
    assert config_name == "shop-redlock-config"
    assert ("ConfigMap", config_name) in by_name
    secret_names = {s["secret"]["name"] for s in volumes["redlock-secrets"]["projected"]["sources"]}
    assert secret_names == {"shop-redlock-auth"}
    assert ("Secret", "shop-redlock-auth") in by_name
    assert len([d for d in docs if d["kind"] == "StatefulSet"]) == 3
    # The image tag is redlock-agent's appVersion, not the app chart's.
    assert agent["image"] == "redlock-agent:0.1.0"

    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)


def test_app_chart_in_node_mode_mounts_the_nodes_socket(app_chart):
    """The same app template with mode=node: no agent in the app's pod but
    the node's socket directory (a hostPath that must exist) at the same
    path; the dependency renders the DaemonSet; all valid Kubernetes."""
    docs = render_app(app_chart, {"redlock": {"mode": "node"}})
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    spec = pod_spec(by_name[("Deployment", "shop-shop")])
    assert [c["name"] for c in spec["containers"]] == ["shop"]
    assert not spec.get("initContainers")
    assert spec["volumes"] == [
        {"name": "redlock-socket", "hostPath": {"path": "/var/run/redlock-agent", "type": "Directory"}}
    ]
    _, app = find_container(spec, "shop")
    assert {e["name"]: e["value"] for e in app["env"]}["REDLOCK_SOCKET"] == "/run/redlock/agent.sock"
    assert app["volumeMounts"] == [{"name": "redlock-socket", "mountPath": "/run/redlock", "readOnly": True}]
    daemonset = by_name[("DaemonSet", "shop-redlock-node")]
    assert pod_spec(daemonset)["hostPID"] is True
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)


def test_app_chart_values_reach_the_sidecar(app_chart):
    docs = render_app(app_chart, {"redlock": {"config": {"socket": {"dir": "/var/run/shop"}}, "image": {"tag": "0.2.0"}}})
    shop = next(d for d in docs if d["kind"] == "Deployment")
    _, agent = find_container(pod_spec(shop), "redlock-agent")
    assert agent["image"] == "redlock-agent:0.2.0"
    assert {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}["redlock-socket"] == "/var/run/shop"
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "shop-redlock-config")
    assert "path: \"/var/run/shop/agent.sock\"" in config["data"]["config.yaml"]


def test_wrong_argument_fails_loudly(tmp_path):
    """Passing the app chart's own values instead of the dependency's is caught."""
    root = tmp_path / "bad"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: bad\nversion: 1.0.0\ndependencies:\n  - name: redlock-agent\n    version: 0.1.0\n")
    (root / "templates" / "cm.yaml").write_text(
        "{{- include \"redlock-agent.sidecar.container\" (dict \"context\" $ \"values\" (dict \"x\" 1)) }}\n"
    )
    shutil.copytree(CHART, root / "charts" / "redlock-agent")
    with helm_python.Chart.load(root) as chart:
        with pytest.raises(helm_python.HelmError) as caught:
            chart.render({"redlock-agent": {"demo": {"enabled": False}}}, name="x", namespace="x")
    assert "pass the redlock-agent dependency's values" in str(caught.value)
