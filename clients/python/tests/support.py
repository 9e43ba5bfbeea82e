"""A real agent for the tests: `redlock-agent dev` (three real
redis-server masters) on a temp socket, and polling with a deadline.

The agent binary is $REDLOCK_AGENT, or target/debug/redlock-agent of this
repository (`cargo build -p redlock-agent`).
"""

import os
import pathlib
import signal
import subprocess
import tempfile
import time

from redlock_client import Client, Unreachable

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
EXAMPLES = HERE.parent / "examples"
DEADLINE = 15.0


def wait_for(what, condition, deadline=DEADLINE):
    """Polls `condition` until it is true; fails after `deadline` seconds."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.02)


def agent_binary():
    path = os.environ.get("REDLOCK_AGENT") or str(ROOT / "target" / "debug" / "redlock-agent")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            "no agent binary at %s: run `cargo build -p redlock-agent` or set REDLOCK_AGENT" % path
        )
    return path


class Agent:
    """`redlock-agent dev` on a temp socket; SIGTERM stops it and its masters."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="redlock-py-")
        self.socket = os.path.join(self.dir.name, "agent.sock")
        self.log = open(os.path.join(self.dir.name, "agent.log"), "w+")
        self.process = subprocess.Popen(
            [agent_binary(), "dev", "--socket", self.socket, "--masters", "3",
             "--metrics", "127.0.0.1:0"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        client = Client(self.socket)

        def ready():
            if self.process.poll() is not None:
                raise AssertionError("the agent exited:\n" + self.output())
            try:
                return client.nodes()["available"]
            except Unreachable:
                return False

        wait_for("the agent and a usable quorum", ready)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        self.dir.cleanup()

    @property
    def admin_socket(self):
        """Force release is served only on the admin socket, beside it."""
        return os.path.join(os.path.dirname(self.socket), "admin.sock")
