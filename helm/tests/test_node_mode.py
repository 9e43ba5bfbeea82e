"""Node mode (mode=node): the agent as a DaemonSet serving its node's pods
through a socket in a host directory, hostPID exactly when it tells pods
apart, the application side through the same sidecar templates, and the
values that cannot work refused. Sidecar mode is left as it was."""

from __future__ import annotations

import shutil

import helm_python
import pytest

from conftest import CHART, FULLNAME, NAMESPACE, find_container, pod_spec

NODE = f"{FULLNAME}-node"
DEMO = f"{FULLNAME}-demo"


def node_mode(**node) -> dict:
    values: dict = {"mode": "node"}
    if node:
        values["node"] = node
    return values


def volumes(spec) -> dict:
    return {v["name"]: v for v in spec.get("volumes", [])}


def mounts(container) -> dict:
    return {m["name"]: m for m in container.get("volumeMounts", [])}


def all_containers(spec) -> list:
    return (spec.get("initContainers") or []) + spec["containers"]


def test_node_mode_is_a_daemonset_and_pods_carry_no_sidecar(default, render):
    """One DaemonSet more than the default install, nothing less; the demo
    pods lock through it, with no agent container of their own."""
    r = render(node_mode())
    assert sorted(r.names()) == sorted([*default.names(), f"DaemonSet/{NODE}"])
    ds = r.get("DaemonSet", NODE)
    assert ds["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent"
    assert ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "node-agent"
    where, agent = find_container(pod_spec(ds), "redlock-agent")
    assert where == "containers" and "restartPolicy" not in agent, "a DaemonSet's agent is a regular container"
    demo = pod_spec(r.get("Deployment", DEMO))
    assert [c["name"] for c in all_containers(demo)] == ["app"]
    # The PodMonitor's label, so that the node agents are scraped.
    assert ds["spec"]["template"]["metadata"]["labels"]["redlock-agent/sidecar"] == "true"


@pytest.mark.parametrize("socket_dir", ["/var/run/redlock-agent", "/run/locks"])
def test_the_socket_is_in_a_host_directory_the_pods_mount(render, socket_dir):
    """The agent makes node.socketDir (DirectoryOrCreate) and binds its socket
    there, at config.socket.dir inside its container; the demo's app mounts
    the same host directory read-only, as a Directory that must exist, at
    the same path, and REDLOCK_SOCKET names the socket in it."""
    r = render(node_mode(socketDir=socket_dir))
    ds = pod_spec(r.get("DaemonSet", NODE))
    assert volumes(ds)["redlock-socket"]["hostPath"] == {"path": socket_dir, "type": "DirectoryOrCreate"}
    _, agent = find_container(ds, "redlock-agent")
    assert mounts(agent)["redlock-socket"]["mountPath"] == "/run/redlock"
    assert r.agent_config()["socket"]["path"] == "/run/redlock/agent.sock"

    demo = pod_spec(r.get("Deployment", DEMO))
    assert volumes(demo)["redlock-socket"]["hostPath"] == {"path": socket_dir, "type": "Directory"}
    _, app = find_container(demo, "app")
    assert mounts(app)["redlock-socket"] == {"name": "redlock-socket", "mountPath": "/run/redlock", "readOnly": True}
    assert {e["name"]: e.get("value") for e in app["env"]}["REDLOCK_SOCKET"] == "/run/redlock/agent.sock"
    # The app's pod gets the agent's group, which the socket (0660) admits.
    assert demo["securityContext"]["fsGroup"] == 65532
    assert r.agent_config()["socket"]["mode"] == "0660"


@pytest.mark.parametrize("isolate, host_pid", [("pod", True), ("uid", False), ("none", False)])
def test_host_pid_exactly_when_pods_are_told_apart(render, isolate, host_pid):
    """SO_PEERCRED gives a peer's pid in the agent's pid namespace (0 for
    another pod's process), so only isolation by pod needs the host's; the
    agent's config isolates as node.isolate says. No other pod shares the
    host's pid namespace."""
    r = render(node_mode(isolate=isolate))
    ds = pod_spec(r.get("DaemonSet", NODE))
    assert ds.get("hostPID", False) is host_pid
    assert r.agent_config()["socket"]["isolate"] == isolate
    for doc in r.docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            assert "hostPID" not in pod_spec(doc), doc["metadata"]["name"]
    for spec in [pod_spec(d) for d in r.docs if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet")]:
        assert not spec.get("hostNetwork") and not spec.get("hostIPC")


def test_sidecar_mode_is_unchanged(default, render):
    """mode=sidecar is the default and renders exactly what the chart did;
    node.* is not read then; the sidecar's agent isolates nothing."""
    # A given password: the generated one differs from render to render.
    same = {"auth": {"password": "p"}}
    sidecar = render(same).docs
    assert render({**same, "mode": "sidecar"}).docs == sidecar
    assert render({**same, "node": {"isolate": "uid", "socketDir": "/elsewhere"}}).docs == sidecar
    assert not default.of_kind("DaemonSet")
    assert default.agent_config()["socket"]["isolate"] == "none"
    demo = pod_spec(default.get("Deployment", DEMO))
    assert "emptyDir" in volumes(demo)["redlock-socket"]
    assert not any("hostPath" in v for v in volumes(demo).values())
    assert "hostPID" not in demo


def test_the_node_agent_gets_only_what_it_needs(render):
    """The agent runs as its uid with no capability on a read-only root, its
    admin socket on a volume only it mounts (never the host directory); the
    one root step is the init container that chowns the host directory,
    with CAP_CHOWN alone; no service account token."""
    r = render(node_mode())
    spec = pod_spec(r.get("DaemonSet", NODE))
    assert spec["automountServiceAccountToken"] is False
    _, agent = find_container(spec, "redlock-agent")
    sc = agent["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532 and sc["runAsGroup"] == 65532
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert "emptyDir" in volumes(spec)["redlock-admin"]
    assert mounts(agent)["redlock-admin"]["mountPath"] == "/run/redlock-admin"

    where, init = find_container(spec, "socket-dir")
    assert where == "initContainers"
    assert init["command"] == ["chown", "65532:65532", "/socket"]
    isc = init["securityContext"]
    assert isc["runAsUser"] == 0
    assert isc["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert isc["readOnlyRootFilesystem"] is True and isc["allowPrivilegeEscalation"] is False
    assert list(mounts(init)) == ["redlock-socket"]
    assert init["image"] == "busybox:1.37.0"


@pytest.mark.parametrize(
    "sidecar, owner", [({"runAsUser": 1234, "runAsGroup": 55}, "1234:55"), ({"runAsGroup": None}, "65532")]
)
def test_the_host_directory_goes_to_the_agents_uid(render, sidecar, owner):
    r = render({**node_mode(), "sidecar": sidecar})
    _, init = find_container(pod_spec(r.get("DaemonSet", NODE)), "socket-dir")
    assert init["command"][1] == owner


def test_node_placement_values_reach_the_daemonset(render):
    r = render(
        node_mode(
            priorityClassName="system-node-critical",
            nodeSelector={"pool": "apps"},
            tolerations=[{"operator": "Exists"}],
            podAnnotations={"a": "b"},
            maxUnavailable=3,
            terminationGracePeriodSeconds=45,
            initImage={"repository": "mirror/busybox", "tag": "1", "digest": "sha256:" + "a" * 64, "pullPolicy": "Always"},
        )
    )
    ds = r.get("DaemonSet", NODE)
    spec = pod_spec(ds)
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"] == {"pool": "apps"}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["terminationGracePeriodSeconds"] == 45
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 3
    assert ds["spec"]["template"]["metadata"]["annotations"]["a"] == "b"
    _, init = find_container(spec, "socket-dir")
    assert (init["image"], init["imagePullPolicy"]) == ("mirror/busybox@sha256:" + "a" * 64, "Always")


def test_node_notes_say_where_the_socket_is_and_how_to_reach_an_agent(render):
    notes = render(node_mode()).notes
    assert f"DaemonSet {NODE}" in notes
    assert "/var/run/redlock-agent/agent.sock on the host" in notes
    assert "hostPID" in notes
    assert f"kubectl -n {NAMESPACE} rollout status daemonset/{NODE}" in notes
    assert f"deployment/{DEMO} -c redlock-agent" not in notes, "the demo has no agent container"
    assert "isolate: uid" in render(node_mode(isolate="uid")).notes


# (id, values, words the error must contain)
REFUSED = [
    ("mode-unknown", {"mode": "daemonset"}, ["/mode", "one of 'sidecar', 'node'"]),
    ("isolate-unknown", node_mode(isolate="pods"), ["/node/isolate"]),
    ("socket-dir-relative", node_mode(socketDir="run/redlock"), ["/node/socketDir", "does not match pattern"]),
    ("socket-dir-root", node_mode(socketDir="/"), ["/node/socketDir"]),
    ("node-unknown-key", node_mode(hostPID=True), ["/node", "'hostPID' not allowed"]),
    ("init-image-without-tag", node_mode(initImage={"tag": ""}), ["/node/initImage/tag"]),
    ("node-mode-without-a-uid", {**node_mode(), "sidecar": {"runAsUser": None}}, ["/sidecar", "runAsUser"]),
]


@pytest.mark.parametrize("values, words", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_values_that_cannot_work_are_refused(chart, values, words):
    with pytest.raises(helm_python.HelmError) as caught:
        chart.render(values, name="rl", namespace="locks")
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in the error:\n{message}"


def test_the_uid_check_holds_without_the_schema(tmp_path):
    """Node mode with no uid for the agent is refused by the templates too,
    naming the value."""
    copy = tmp_path / "redlock-agent"
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    with helm_python.Chart.load(copy) as unchecked:
        with pytest.raises(helm_python.HelmError) as caught:
            unchecked.render({**node_mode(), "sidecar": {"runAsUser": None}}, name="rl", namespace="locks")
        # Sidecar mode still leaves the uid to the platform.
        unchecked.render({"sidecar": {"runAsUser": None}}, name="rl", namespace="locks")
    assert "sidecar.runAsUser: null, but mode=node" in str(caught.value)
