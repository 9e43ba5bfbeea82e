"""The image the chart runs: the Dockerfile and the chart agree on the user,
the entrypoint and the config path. (The image is not built here.)"""

from __future__ import annotations

import re

from conftest import REPO, find_container, pod_spec

DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_dockerfile_builds_both_binaries_locked_in_a_separate_stage():
    assert len(re.findall(r"^FROM ", DOCKERFILE, re.M)) == 2, "multi-stage: build, then run"
    assert re.search(r"cargo build --release --locked -p redlock-agent -p redlock-tui", DOCKERFILE)
    assert re.search(r"target/release/redlock-agent target/release/redlock-tui", DOCKERFILE)
    assert re.search(r'^ENTRYPOINT \["/usr/local/bin/redlock-agent"\]', DOCKERFILE, re.M)


def test_chart_runs_the_image_as_its_user_with_its_config_path(default):
    (user,) = re.findall(r"^USER (\d+):(\d+)$", DOCKERFILE, re.M)
    spec = pod_spec(default.get("Deployment", "rl-redlock-agent-demo"))
    _, agent = find_container(spec, "redlock-agent")
    sc = agent["securityContext"]
    assert (str(sc["runAsUser"]), str(sc["runAsGroup"])) == user
    cmd = re.search(r"^CMD (\[.*\])$", DOCKERFILE, re.M).group(1)
    assert cmd == '["' + '", "'.join(agent["args"]) + '"]'


def test_dockerignore_keeps_build_output_out_of_the_context():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "target" in ignored and ".git" in ignored
