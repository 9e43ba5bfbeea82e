"""values.yaml and values.schema.json: bad values are refused with a message
naming the value; every key is documented; the schema is strict on our
blocks."""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import helm_python
import pytest
import yaml

from conftest import CHART

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()
VALUES = yaml.safe_load(VALUES_TEXT)

EXTERNAL3 = [
    {"name": "r1", "url": "redis://r1:6379"},
    {"name": "r2", "url": "redis://r2:6379"},
    {"name": "r3", "url": "redis://r3:6379"},
]

SEEDS = ["redis://c-0:6379", "redis://c-1:6379"]


def external(first: dict) -> dict:
    """Values with three external masters, `first` being the one under test."""
    return {"masters": {"deploy": False, "external": [first, *EXTERNAL3[1:]]}, "auth": {"enabled": False}}


# (id, values, words the error must contain)
REFUSED = [
    ("even-master-count", {"masters": {"count": 4}}, ["/masters/count", "one of 1, 3, 5, 7, 9"]),
    ("zero-masters", {"masters": {"count": 0}}, ["/masters/count"]),
    ("unknown-top-level-key", {"replicaCount": 3}, ["additional properties 'replicaCount' not allowed"]),
    ("unknown-nested-key", {"config": {"lock": {"ttl": "10s"}}}, ["/config/lock", "'ttl' not allowed"]),
    ("unknown-master-key", {"masters": {"replicas": 2}}, ["/masters", "'replicas' not allowed"]),
    ("ttl-not-a-duration", {"config": {"lock": {"defaultTtl": "ten seconds"}}}, ["/config/lock/defaultTtl", "does not match pattern"]),
    ("ttl-a-bare-number", {"config": {"lock": {"maxTtl": 10}}}, ["/config/lock/maxTtl", "want string"]),
    ("ttl-without-unit", {"config": {"lock": {"nodeTimeout": "50"}}}, ["/config/lock/nodeTimeout"]),
    ("grace-not-a-duration", {"config": {"shutdown": {"grace": "soon"}}}, ["/config/shutdown/grace"]),
    ("drift-too-large", {"config": {"lock": {"driftFactor": 0.5}}}, ["/config/lock/driftFactor"]),
    ("socket-mode-unquoted", {"config": {"socket": {"mode": 660}}}, ["/config/socket/mode", "want string"]),
    ("socket-mode-not-octal", {"config": {"socket": {"mode": "0999"}}}, ["/config/socket/mode"]),
    ("log-format", {"config": {"log": {"format": "xml"}}}, ["/config/log/format"]),
    ("key-prefix-glob", {"config": {"lock": {"keyPrefix": "locks:*"}}}, ["/config/lock/keyPrefix"]),
    ("metrics-host-name", {"config": {"metrics": {"address": "localhost"}}}, ["/config/metrics/address"]),
    ("replication-in-extra-args", {"masters": {"extraArgs": ["--replicaof", "x 6379"]}}, ["/masters/extraArgs/0"]),
    ("external-url-not-redis", {"masters": {"deploy": False, "external": [{"name": "a", "url": "http://a:6379"}]}}, ["/masters/external/0/url"]),
    ("external-master-unknown-key", {"masters": {"deploy": False, "external": [{"name": "a", "url": "redis://a", "password": "x"}]}}, ["/masters/external/0", "'password' not allowed"]),
    ("agent-delivery", {"auth": {"agentDelivery": "volume"}}, ["/auth/agentDelivery"]),
    ("external-url-and-cluster", external({"name": "c", "url": "redis://a:6379", "cluster": SEEDS}), ["/masters/external/0", "'oneOf' failed, subschemas 0, 1 matched"]),
    ("external-neither-url-nor-cluster", external({"name": "c"}), ["/masters/external/0", "missing property 'url'", "missing property 'cluster'"]),
    ("external-cluster-empty", external({"name": "c", "cluster": []}), ["/masters/external/0/cluster", "minItems"]),
    ("external-cluster-not-a-list", external({"name": "c", "cluster": "redis://c-0:6379"}), ["/masters/external/0/cluster", "want array"]),
    ("external-cluster-seed-not-redis", external({"name": "c", "cluster": ["redis://c-0:6379", "http://c-1:6379"]}), ["/masters/external/0/cluster/1", "does not match pattern"]),
    # Refused by the templates (what JSON Schema cannot say).
    ("even-external-count", {"masters": {"deploy": False, "external": EXTERNAL3[:2]}, "auth": {"enabled": False}}, ["2 masters is an even number"]),
    ("no-external-masters", {"masters": {"deploy": False}}, ["masters.external: empty while masters.deploy=false"]),
    ("deploy-and-external", {"masters": {"external": EXTERNAL3}}, ["not both"]),
    ("duplicate-external-names", {"masters": {"deploy": False, "external": [EXTERNAL3[0], EXTERNAL3[1], EXTERNAL3[0]]}, "auth": {"enabled": False}}, ['masters.external[2].name: "r1" is used twice']),
    ("password-in-external-url", {"masters": {"deploy": False, "external": [{"name": "a", "url": "redis://:hunter2@a:6379"}]}, "auth": {"enabled": False}}, ["masters.external[0].url: contains a password", "passwordSecret"]),
    ("external-auth-without-password", {"masters": {"deploy": False, "external": EXTERNAL3}}, ["masters.external[0]: auth.enabled=true but no password is known"]),
    ("password-in-cluster-seed", external({"name": "c", "cluster": ["redis://c-0:6379", "redis://:hunter2@c-1:6379"]}), ["masters.external[0].cluster[1]: contains a password", "passwordSecret"]),
    ("cluster-shares-a-node-with-a-single", external({"name": "c", "cluster": ["redis://c-0:6379", "redis://R2:6379"]}), ["masters.external[1].url: r2:6379 is also a node of masters.external[0] (masters.external[0].cluster[1])", "must not share a node"]),
    ("two-clusters-share-a-seed", {"masters": {"deploy": False, "external": [{"name": "c", "cluster": ["redis://c-0"]}, {"name": "d", "cluster": ["redis://d-0:6379", "redis://c-0:6379"]}, EXTERNAL3[2]]}, "auth": {"enabled": False}}, ["masters.external[1].cluster[1]: c-0:6379 is also a node of masters.external[0] (masters.external[0].cluster[0])"]),
    ("pdb-breaks-quorum", {"masters": {"count": 5, "pdb": {"maxUnavailable": 3}}}, ["masters.pdb.maxUnavailable: 3", "use at most 2"]),
    ("admin-socket-in-the-shared-dir", {"config": {"admin": {"socket": {"dir": "/run/redlock"}}}}, ["config.admin.socket.dir: must differ from config.socket.dir"]),
    ("admin-socket-under-the-shared-dir", {"config": {"admin": {"socket": {"dir": "/run/redlock/admin"}}}}, ["config.admin.socket.dir: must not be inside config.socket.dir"]),
    ("allow-uids-not-numbers", {"config": {"socket": {"allowUids": ["app"]}}}, ["/config/socket/allowUids/0"]),
    ("waiter-share-above-max-waiters", {"config": {"lock": {"maxWaiters": 100}}}, ["config.lock.maxWaitersPerUid: 7500 is above config.lock.maxWaiters (100)"]),
    ("metrics-budget-too-large", {"config": {"metrics": {"maxConnections": 5000}}}, ["/config/metrics/maxConnections"]),
]


@pytest.mark.parametrize("values, words", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_bad_values_are_refused_with_a_clear_message(chart, values, words):
    with pytest.raises(helm_python.HelmError) as caught:
        chart.render(values, name="rl", namespace="locks")
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in the error:\n{message}"
    assert "password" not in words or "hunter2" not in message


def test_password_in_url_is_not_echoed_back(chart):
    with pytest.raises(helm_python.HelmError) as caught:
        chart.render(
            {"masters": {"deploy": False, "external": [{"name": "a", "url": "redis://:hunter2@a:6379"}]}, "auth": {"enabled": False}},
            name="rl",
            namespace="locks",
        )
    assert "hunter2" not in str(caught.value)


def test_template_checks_hold_without_the_schema(tmp_path):
    """With no schema check (--skip-schema-validation, or a parent chart's
    values slipping past it), the templates still refuse an even N."""
    copy = tmp_path / "redlock-agent"
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    with helm_python.Chart.load(copy) as unchecked:
        with pytest.raises(helm_python.HelmError) as caught:
            unchecked.render({"masters": {"count": 4}}, name="rl", namespace="locks")
    assert "4 masters is an even number" in str(caught.value)


# What the templates say when the schema is skipped: (values, the message).
UNCHECKED = [
    (external({"name": "c", "url": "redis://a:6379", "cluster": SEEDS}), "masters.external[0]: both url and cluster are set"),
    (external({"name": "c"}), "masters.external[0]: neither url nor cluster is set"),
    (external({"name": "c", "cluster": []}), "masters.external[0].cluster: empty; list at least one seed URL"),
    (external({"name": "c", "cluster": ["redis://c-0:6379", "http://c-1:6379"]}), 'masters.external[0].cluster[1]: not a redis:// or rediss:// URL: "http://c-1:6379"'),
]


def test_template_checks_of_a_cluster_master_hold_without_the_schema(tmp_path):
    """A master is one server (url) or one Redis Cluster (cluster), never
    both, never neither, never an empty cluster: the templates say so with
    the field path even when the schema is not checked."""
    copy = tmp_path / "redlock-agent"
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    with helm_python.Chart.load(copy) as unchecked:
        for values, message in UNCHECKED:
            with pytest.raises(helm_python.HelmError) as caught:
                unchecked.render(values, name="rl", namespace="locks")
            assert message in str(caught.value), f"{message!r} not in the error:\n{caught.value}"


def test_the_schema_accepts_a_cluster_master(chart):
    """Exactly one of url and cluster: a cluster master alone passes."""
    chart.validate_schema(external({"name": "c", "cluster": SEEDS}))
    chart.validate_schema(external({"name": "c", "cluster": ["rediss://c-0:6380"], "passwordSecret": {"name": "s", "key": "k"}}))


def test_defaults_pass_the_schema(chart):
    chart.validate_schema({})
    chart.validate_schema(VALUES)


# --- documentation ----------------------------------------------------------


def leaf_paths(tree: Any, prefix: str = "") -> set[str]:
    """Dotted paths of every value that is not a non-empty mapping."""
    if isinstance(tree, dict) and tree:
        out: set[str] = set()
        for key, value in tree.items():
            out |= leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix}


PARAMS = re.findall(r"^\s*## @param (\S+) \S", VALUES_TEXT, re.M)


def test_every_values_key_has_a_param_comment():
    """Every value is documented by `## @param <path> <description>` on itself
    or on the block that holds it (e.g. a resources map)."""
    documented = set(PARAMS)
    missing = [p for p in sorted(leaf_paths(VALUES)) if not any(p == d or p.startswith(d + ".") for d in documented)]
    assert not missing, f"values without a ## @param comment: {missing}"


def test_every_param_comment_names_a_real_key():
    assert len(PARAMS) == len(set(PARAMS)), "a key is documented twice"
    for path in PARAMS:
        node: Any = VALUES
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"## @param {path}: no such key in values.yaml"
            node = node[part]


def test_param_comment_sits_right_above_its_key():
    lines = VALUES_TEXT.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)## @param (\S+) ", line)
        if not m:
            continue
        key = m.group(2).rsplit(".", 1)[-1]
        following = next(l for l in lines[i + 1 :] if l.strip() and not l.strip().startswith("## @param"))
        assert re.match(rf"^{m.group(1)}{re.escape(key)}:", following), f"line {i + 1}: @param {m.group(2)} is not above its key"


def schema_nodes(node: dict, path: str = ""):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from schema_nodes(sub, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict) and node["items"].get("properties"):
        yield from schema_nodes(node["items"], f"{path}[]")


def test_schema_describes_every_property_and_is_strict_on_our_blocks():
    for path, node in schema_nodes(SCHEMA):
        assert node.get("description"), f"schema {path or '<root>'}: no description"
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"schema {path or '<root>'}: not strict"


def test_schema_and_values_have_the_same_keys():
    """Each values.yaml key is in the schema, and the schema has no key values.yaml lacks."""

    def walk(values: dict, schema: dict, path: str):
        props = schema.get("properties")
        if props is None:
            return
        assert set(values) == set(props), f"{path or '<root>'}: values {sorted(set(values) ^ set(props))} differ from the schema"
        for key, value in values.items():
            if isinstance(value, dict):
                walk(value, props[key], f"{path}.{key}" if path else key)

    walk(VALUES, SCHEMA, "")
