"""What the chart must get right, asserted on rendered manifests: the
sidecar wiring, the masters, where passwords go."""

from __future__ import annotations

import base64
import re
from urllib.parse import urlsplit

import pytest

from conftest import FULLNAME, NAMESPACE, find_container, pod_spec

DEMO = f"{FULLNAME}-demo"
CONFIG = f"{FULLNAME}-config"
SENTINEL = "S3ntinel-Passw0rd-never-in-configmaps"


def volume(spec, name):
    found = [v for v in spec.get("volumes", []) if v["name"] == name]
    assert found, f"no volume {name!r}; have {[v['name'] for v in spec.get('volumes', [])]}"
    return found[0]


def mount(container, volume_name):
    found = [m for m in container.get("volumeMounts", []) if m["name"] == volume_name]
    assert found, f"{container['name']} does not mount {volume_name!r}"
    return found[0]


def test_default_install_renders_exactly_these_resources(default):
    """The default install: agent config, generated auth Secret, 5 masters
    (Service + StatefulSet each), their PDB, the demo; no monitoring."""
    masters = [f"{kind}/{FULLNAME}-master-{i}" for i in range(1, 6) for kind in ("Service", "StatefulSet")]
    want = {
        f"ConfigMap/{CONFIG}",
        f"Secret/{FULLNAME}-auth",
        f"PodDisruptionBudget/{FULLNAME}-masters",
        f"ConfigMap/{DEMO}",
        f"Deployment/{DEMO}",
        *masters,
    }
    assert sorted(default.names()) == sorted(want)


# --- the sidecar -------------------------------------------------------------


def test_native_sidecar_is_a_restartable_init_container(default):
    """sidecar.native=true (default): the agent is an initContainer with
    restartPolicy Always, and not also a regular container."""
    spec = pod_spec(default.get("Deployment", DEMO))
    where, agent = find_container(spec, "redlock-agent")
    assert where == "initContainers"
    assert agent["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["app"]


def test_classic_sidecar_is_a_regular_container(render):
    """sidecar.native=false: the agent runs beside the app, no initContainers."""
    spec = pod_spec(render({"sidecar": {"native": False}}).get("Deployment", DEMO))
    where, agent = find_container(spec, "redlock-agent")
    assert where == "containers"
    assert "restartPolicy" not in agent
    assert "initContainers" not in spec
    assert sorted(c["name"] for c in spec["containers"]) == ["app", "redlock-agent"]


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_app_and_agent_share_the_socket_volume(render, native):
    """Both containers mount the same emptyDir at the socket's directory, and
    the app is told the socket path the agent's config listens on."""
    r = render({"sidecar": {"native": native}})
    spec = pod_spec(r.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    _, app = find_container(spec, "app")
    socket_path = r.agent_config()["socket"]["path"]
    assert socket_path == "/run/redlock/agent.sock"

    assert "emptyDir" in volume(spec, "redlock-socket")
    agent_mount, app_mount = mount(agent, "redlock-socket"), mount(app, "redlock-socket")
    assert agent_mount["mountPath"] == app_mount["mountPath"] == socket_path.rsplit("/", 1)[0]
    assert not agent_mount.get("readOnly"), "the agent must be able to create the socket"
    env = {e["name"]: e.get("value") for e in app["env"]}
    assert env["REDLOCK_SOCKET"] == socket_path
    # The app (another uid) reaches the 0660 socket through the pod's fsGroup.
    assert r.agent_config()["socket"]["mode"] == "0660"
    assert spec["securityContext"]["fsGroup"] == agent["securityContext"]["runAsGroup"]


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_admin_socket_is_on_a_volume_only_the_agent_mounts(render, native):
    """Force release is served on the admin socket only; its emptyDir is
    mounted in the agent container and nowhere else, so the application
    cannot reach it, while `kubectl exec ... -c redlock-agent -- redlock-tui`
    finds it through REDLOCK_ADMIN_SOCKET. The agent is named after its pod."""
    r = render({"sidecar": {"native": native}})
    spec = pod_spec(r.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    _, app = find_container(spec, "app")
    config = r.agent_config()
    admin_path = config["admin"]["socket"]["path"]
    assert admin_path == "/run/redlock-admin/admin.sock"
    assert config["admin"]["socket"]["mode"] == "0600"
    admin_dir = admin_path.rsplit("/", 1)[0]

    assert "emptyDir" in volume(spec, "redlock-admin")
    assert mount(agent, "redlock-admin")["mountPath"] == admin_dir
    app_mounts = app.get("volumeMounts", [])
    assert all(m["name"] != "redlock-admin" for m in app_mounts), app_mounts
    assert all(
        not admin_dir.startswith(m["mountPath"].rstrip("/") + "/") and m["mountPath"] != admin_dir
        for m in app_mounts
    ), f"the app container mounts the admin socket's directory: {app_mounts}"
    assert all("REDLOCK_ADMIN_SOCKET" != e["name"] for e in app.get("env", []))

    env = {e["name"]: e for e in agent["env"]}
    assert env["REDLOCK_ADMIN_SOCKET"]["value"] == admin_path
    assert env["REDLOCK_AGENT_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_socket_path_follows_values(render):
    r = render({"config": {"socket": {"dir": "/var/run/locks", "name": "rl.sock"}}})
    spec = pod_spec(r.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    _, app = find_container(spec, "app")
    assert r.agent_config()["socket"]["path"] == "/var/run/locks/rl.sock"
    assert mount(agent, "redlock-socket")["mountPath"] == mount(app, "redlock-socket")["mountPath"] == "/var/run/locks"


def test_agent_runs_on_its_config_map(default):
    """args --config /etc/redlock/config.yaml, and that file is the ConfigMap's key."""
    spec = pod_spec(default.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    assert agent["args"] == ["--config", "/etc/redlock/config.yaml"]
    assert "command" not in agent, "the image's entrypoint is redlock-agent"
    assert agent["image"] == "redlock-agent:0.1.0"
    assert mount(agent, "redlock-config")["mountPath"] == "/etc/redlock"
    assert volume(spec, "redlock-config")["configMap"]["name"] == CONFIG
    assert "config.yaml" in default.get("ConfigMap", CONFIG)["data"]


def test_probes_hit_healthz_and_readyz_on_the_metrics_port(default):
    """Liveness /healthz, readiness /readyz, over the port metrics.listen names."""
    spec = pod_spec(default.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    listen = default.agent_config()["metrics"]["listen"]
    host, port = listen.rsplit(":", 1)
    assert host == "0.0.0.0", "the kubelet probes the pod IP, not loopback"
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"redlock-metrics": int(port)}
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "redlock-metrics"}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "redlock-metrics"}
    assert agent["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "redlock-metrics"}


def test_readiness_probe_can_be_turned_off(render):
    spec = pod_spec(render({"sidecar": {"readinessProbe": {"enabled": False}}}).get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    assert "readinessProbe" not in agent
    assert "livenessProbe" in agent


def test_agent_security_context_is_restrictive(default):
    spec = pod_spec(default.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    sc = agent["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert agent["resources"]["requests"] and agent["resources"]["limits"]


def test_agent_uid_can_be_left_to_the_platform(render):
    """runAsUser/runAsGroup null (e.g. OpenShift's assigned uids) drop the fields."""
    spec = pod_spec(render({"sidecar": {"runAsUser": None, "runAsGroup": None}}).get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    assert "runAsUser" not in agent["securityContext"]
    assert "runAsGroup" not in agent["securityContext"]
    assert agent["securityContext"]["runAsNonRoot"] is True


def test_demo_app_locks_through_the_socket(default):
    """The demo loop acquires and releases through the socket API."""
    script = default.get("ConfigMap", DEMO)["data"]["demo.sh"]
    assert '--unix-socket "$sock"' in script
    assert "/acquire" in script and "/release" in script
    assert '\\"ttl_ms\\"' in script and '\\"token\\"' in script
    spec = pod_spec(default.get("Deployment", DEMO))
    _, app = find_container(spec, "app")
    assert app["command"] == ["/bin/sh", "/demo/demo.sh"]
    assert app["securityContext"]["runAsNonRoot"] is True
    assert app["securityContext"]["readOnlyRootFilesystem"] is True


def test_pod_rolls_when_the_config_changes(render):
    def checksum(values):
        return render(values).get("Deployment", DEMO)["spec"]["template"]["metadata"]["annotations"]["checksum/redlock-config"]

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"config": {"lock": {"maxTtl": "30s"}}})


def test_demo_off_renders_no_sidecar_pod(render):
    r = render({"demo": {"enabled": False}})
    assert not r.of_kind("Deployment")
    assert r.get("ConfigMap", CONFIG)


# --- the masters -------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 3, 5, 7])
def test_masters_are_n_independent_statefulsets(render, count):
    """N single-replica StatefulSets with distinct names and selectors, each
    with its own Service; no replication flags; the config lists exactly
    them."""
    r = render({"masters": {"count": count, "pdb": {"maxUnavailable": (count - 1) // 2}}})
    sets = r.of_kind("StatefulSet")
    assert len(sets) == count
    names = [s["metadata"]["name"] for s in sets]
    assert len(set(names)) == count
    selectors = [tuple(sorted(s["spec"]["selector"]["matchLabels"].items())) for s in sets]
    assert len(set(selectors)) == count, "two masters share a selector"
    config_masters = r.agent_config()["masters"]
    assert len(config_masters) == count
    assert len({m["name"] for m in config_masters}) == count

    for sts, cm in zip(sets, config_masters):
        assert sts["spec"]["replicas"] == 1
        _, redis = find_container(pod_spec(sts), "redis")
        args = " ".join(redis.get("command", []) + redis.get("args", []))
        assert not re.search(r"replicaof|slaveof", args, re.I), args
        svc = r.get("Service", sts["metadata"]["name"])
        assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
        url = urlsplit(cm["url"])
        assert url.scheme == "redis"
        assert url.hostname == f"{svc['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        assert url.port == svc["spec"]["ports"][0]["port"]
        assert url.password is None


def test_masters_keep_no_data_by_default(default):
    """Persistence off: no save, no AOF, an emptyDir; delayed restart on."""
    for sts in default.of_kind("StatefulSet"):
        assert "volumeClaimTemplates" not in sts["spec"]
        _, redis = find_container(pod_spec(sts), "redis")
        args = redis["args"]
        assert args[args.index("--save") + 1] == ""
        assert args[args.index("--appendonly") + 1] == "no"
        assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
        assert "emptyDir" in volume(pod_spec(sts), "data")
    assert default.agent_config()["delayed_restart"]["enabled"] is True


def test_persistence_gives_each_master_a_claim_and_an_aof(render):
    r = render({"masters": {"persistence": {"enabled": True, "size": "2Gi", "storageClass": "ssd"}}})
    for sts in r.of_kind("StatefulSet"):
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
        assert claim["spec"]["storageClassName"] == "ssd"
        _, redis = find_container(pod_spec(sts), "redis")
        args = redis["args"]
        assert args[args.index("--appendonly") + 1] == "yes"
        assert args[args.index("--appendfsync") + 1] == "always"
        assert "volumes" not in pod_spec(sts)


def test_masters_spread_and_are_hardened(default):
    for sts in default.of_kind("StatefulSet"):
        spec = pod_spec(sts)
        (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        sel = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert sel["app.kubernetes.io/component"] == "master"
        assert "redlock-agent/master" not in sel, "anti-affinity must cover all masters"
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert spec["securityContext"]["runAsNonRoot"] is True
        _, redis = find_container(spec, "redis")
        assert redis["securityContext"]["readOnlyRootFilesystem"] is True
        assert redis["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert redis["readinessProbe"] and redis["livenessProbe"]


def test_hard_anti_affinity(render):
    for sts in render({"masters": {"antiAffinity": "hard"}}).of_kind("StatefulSet"):
        aff = pod_spec(sts)["affinity"]["podAntiAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" in aff
        assert "preferredDuringSchedulingIgnoredDuringExecution" not in aff


def test_one_pdb_covers_every_master(default):
    (pdb,) = default.of_kind("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    selector = pdb["spec"]["selector"]["matchLabels"]
    for sts in default.of_kind("StatefulSet"):
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), "the PDB misses a master"
    demo_labels = default.get("Deployment", DEMO)["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= demo_labels.items(), "the PDB catches the demo"


def test_external_masters_deploy_nothing(render):
    r = render(
        {
            "masters": {
                "deploy": False,
                "external": [
                    {"name": "a", "url": "rediss://a.example:6380", "passwordSecret": {"name": "pa", "key": "k"}},
                    {"name": "b", "url": "redis://b.example:6379"},
                    {"name": "c", "url": "redis://c.example:6379/0"},
                ],
            },
            "auth": {"existingSecret": "shared", "existingSecretPasswordKey": "pw"},
        }
    )
    assert not r.of_kind("StatefulSet") and not r.of_kind("Service") and not r.of_kind("PodDisruptionBudget")
    assert not r.of_kind("Secret"), "existingSecret given: the chart creates none"
    cfg = r.agent_config()["masters"]
    assert [(m["name"], m["url"]) for m in cfg] == [
        ("a", "rediss://a.example:6380"),
        ("b", "redis://b.example:6379"),
        ("c", "redis://c.example:6379/0"),
    ]
    spec = pod_spec(r.get("Deployment", DEMO))
    sources = volume(spec, "redlock-secrets")["projected"]["sources"]
    items = {s["secret"]["items"][0]["path"]: (s["secret"]["name"], s["secret"]["items"][0]["key"]) for s in sources}
    assert items == {"a": ("pa", "k"), "b": ("shared", "pw"), "c": ("shared", "pw")}


def test_external_masters_without_auth_get_no_password(render):
    r = render(
        {
            "masters": {"deploy": False, "external": [{"name": "solo", "url": "redis://solo:6379"}]},
            "auth": {"enabled": False},
        }
    )
    (m,) = r.agent_config()["masters"]
    assert "password_file" not in m and "password_env" not in m
    spec = pod_spec(r.get("Deployment", DEMO))
    assert "redlock-secrets" not in [v["name"] for v in spec["volumes"]]


def test_cluster_masters_render_their_seeds(render):
    """A master given as `cluster: [seeds]` is one Redlock master over an
    existing Redis Cluster: the agent's config names its seeds under
    `cluster` and no `url`; its password (its own Secret, else auth.*)
    reaches the agent like a single master's; nothing is deployed."""
    r = render(
        {
            "masters": {
                "deploy": False,
                "external": [
                    {"name": "r1", "url": "redis://r1.example:6379"},
                    {"name": "c2", "cluster": ["redis://c2-0.example:6379", "redis://c2-1.example:6379", "redis://c2-2.example:6379"]},
                    {"name": "c3", "cluster": ["rediss://c3.example:6380"], "passwordSecret": {"name": "pc3", "key": "k"}},
                ],
            },
            "auth": {"existingSecret": "shared", "existingSecretPasswordKey": "pw"},
        }
    )
    assert not r.of_kind("StatefulSet") and not r.of_kind("Service")
    cfg = r.agent_config()["masters"]
    assert cfg[0]["url"] == "redis://r1.example:6379" and "cluster" not in cfg[0]
    assert [(m["name"], m.get("url"), m["cluster"]) for m in cfg[1:]] == [
        ("c2", None, ["redis://c2-0.example:6379", "redis://c2-1.example:6379", "redis://c2-2.example:6379"]),
        ("c3", None, ["rediss://c3.example:6380"]),
    ]
    assert [m["password_file"] for m in cfg] == [f"/var/run/secrets/redlock/{n}" for n in ("r1", "c2", "c3")]
    spec = pod_spec(r.get("Deployment", DEMO))
    sources = volume(spec, "redlock-secrets")["projected"]["sources"]
    items = {s["secret"]["items"][0]["path"]: (s["secret"]["name"], s["secret"]["items"][0]["key"]) for s in sources}
    assert items == {"r1": ("shared", "pw"), "c2": ("shared", "pw"), "c3": ("pc3", "k")}
    assert "3 external masters: r1, c2 (a Redis Cluster), c3 (a Redis Cluster)" in r.notes


# --- passwords ---------------------------------------------------------------


def secret_values(r):
    out = []
    for s in r.of_kind("Secret"):
        out += [base64.b64decode(v).decode() for v in (s.get("data") or {}).values()]
        out += list((s.get("stringData") or {}).values())
    return out


def assert_password_only_in_secrets(r, password):
    assert password in secret_values(r)
    for doc in r.docs:
        if doc["kind"] == "Secret":
            continue
        text = repr(doc)
        assert password not in text, f"{doc['kind']}/{doc['metadata']['name']} contains the password"
        if doc["kind"] == "ConfigMap":
            assert base64.b64encode(password.encode()).decode() not in text
    assert password not in r.notes


def test_given_password_never_leaves_the_secret(render):
    r = render({"auth": {"password": SENTINEL}})
    assert_password_only_in_secrets(r, SENTINEL)


def test_generated_password_never_leaves_the_secret(default):
    (secret,) = default.of_kind("Secret")
    password = base64.b64decode(secret["data"]["redis-password"]).decode()
    assert len(password) == 32
    assert_password_only_in_secrets(default, password)


def test_config_points_at_mounted_password_files(default):
    """password_file = <secrets mount>/<master name>, projected from the auth Secret."""
    spec = pod_spec(default.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    mount_path = mount(agent, "redlock-secrets")["mountPath"]
    sources = volume(spec, "redlock-secrets")["projected"]["sources"]
    projected = {s["secret"]["items"][0]["path"]: s["secret"]["name"] for s in sources}
    for m in default.agent_config()["masters"]:
        assert "password_env" not in m
        assert m["password_file"] == f"{mount_path}/{m['name']}"
        assert projected[m["name"]] == f"{FULLNAME}-auth"


def test_masters_read_the_password_from_the_secret(default):
    for sts in default.of_kind("StatefulSet"):
        _, redis = find_container(pod_spec(sts), "redis")
        args = redis["args"]
        assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
        env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in redis["env"]}
        assert env["REDIS_PASSWORD"] == {"name": f"{FULLNAME}-auth", "key": "redis-password"}
        assert env["REDISCLI_AUTH"] == env["REDIS_PASSWORD"]


def test_existing_secret_with_env_delivery(render):
    """auth.existingSecret: no chart Secret; the agent gets password_env vars
    filled from that Secret, the masters likewise."""
    r = render({"auth": {"existingSecret": "ops-redis", "existingSecretPasswordKey": "pw", "agentDelivery": "env"}})
    assert not r.of_kind("Secret")
    spec = pod_spec(r.get("Deployment", DEMO))
    _, agent = find_container(spec, "redlock-agent")
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in agent["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert "redlock-secrets" not in [v["name"] for v in spec["volumes"]]
    for m in r.agent_config()["masters"]:
        assert "password_file" not in m
        assert env[m["password_env"]] == {"name": "ops-redis", "key": "pw"}
    for sts in r.of_kind("StatefulSet"):
        _, redis = find_container(pod_spec(sts), "redis")
        assert {"name": "ops-redis", "key": "pw"} in [e["valueFrom"]["secretKeyRef"] for e in redis["env"]]


def test_auth_off_means_no_password_anywhere(render):
    r = render({"auth": {"enabled": False}})
    assert not r.of_kind("Secret")
    for m in r.agent_config()["masters"]:
        assert set(m) == {"name", "url"}
    for sts in r.of_kind("StatefulSet"):
        _, redis = find_container(pod_spec(sts), "redis")
        assert "--requirepass" not in redis["args"]
        assert "env" not in redis


# --- NOTES -------------------------------------------------------------------


def test_notes_say_how_to_check_the_agent_and_open_the_tui(default):
    notes = default.notes
    assert "/healthz" in notes and "/readyz" in notes
    assert f"kubectl -n {NAMESPACE} exec -it deployment/{DEMO} -c redlock-agent -- redlock-tui\n" in notes
    assert "--unix-socket /run/redlock/agent.sock" in notes


def test_notes_without_demo_still_show_the_tui(render):
    notes = render({"demo": {"enabled": False}}).notes
    assert "-c redlock-agent -- redlock-tui\n" in notes
