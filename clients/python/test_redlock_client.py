"""redlock_client against a real agent on three real redis-server masters
(`redlock-agent dev`), started once for these tests.

    python3 -m unittest -v            # in clients/python

The agent binary is $REDLOCK_AGENT, or target/debug/redlock-agent of this
repository (`cargo build -p redlock-agent`).
"""

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from redlock_client import (
    ApiError,
    Client,
    LockLost,
    Lost,
    Taken,
    Unreachable,
    lock_path,
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
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


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.client = Client(cls.agent.socket)
        # Force release is served only on the admin socket, beside it.
        cls.admin = Client(os.path.join(os.path.dirname(cls.agent.socket), "admin.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        # On a loaded machine a master may miss a 50 ms probe and count as
        # down for a moment (the agent then answers no_quorum, rightly);
        # each test starts from a usable quorum.
        wait_for("a usable quorum", lambda: self.client.nodes()["available"])

    def test_acquire_extend_release_round_trip(self):
        c = self.client
        grant = c.acquire("py-orders-42", ttl_ms=10_000, owner="billing-worker-3")
        self.assertEqual(grant.resource, "py-orders-42")
        self.assertEqual(grant.ttl_ms, 10_000)
        self.assertTrue(0 < grant.validity_ms <= 10_000)
        self.assertTrue(grant.token.endswith(".billing-worker-3"))
        self.assertNotIn(grant.token, repr(grant))
        self.assertGreater(grant.valid_until, time.monotonic())

        with self.assertRaises(Taken) as taken:
            c.acquire("py-orders-42")
        self.assertEqual((taken.exception.status, taken.exception.code), (409, "taken"))

        extended = c.extend("py-orders-42", grant.token, ttl_ms=20_000)
        self.assertEqual(extended.ttl_ms, 20_000)
        self.assertGreater(extended.validity_ms, 10_000)

        self.assertTrue(c.release("py-orders-42", grant.token))
        self.assertFalse(c.release("py-orders-42", grant.token))
        with self.assertRaises(Lost):
            c.extend("py-orders-42", grant.token)

    def test_a_waiter_gets_the_lock_when_it_is_released(self):
        c = self.client
        held = c.acquire("py-queue", ttl_ms=30_000)
        result = {}

        def wait():
            result["grant"] = c.acquire("py-queue", wait_ms=10_000)

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_for(
            "the waiter to queue",
            lambda: any(
                l["resource"] == "py-queue" and l["waiters"] == 1 for l in c.locks()["locks"]
            ),
        )
        self.assertTrue(c.release("py-queue", held.token))
        waiter.join(DEADLINE)
        self.assertNotEqual(result["grant"].token, held.token)
        self.assertTrue(c.release("py-queue", result["grant"].token))

    def test_resources_are_encoded_once_and_refusals_keep_their_code(self):
        c = self.client
        odd = "py/orders:42%20x"
        self.assertEqual(lock_path(odd, "acquire"), "/v1/locks/py%2Forders%3A42%2520x/acquire")
        grant = c.acquire(odd)
        self.assertEqual(grant.resource, odd)
        self.assertIn(odd, [l["resource"] for l in c.locks()["locks"]])
        self.assertTrue(c.release(odd, grant.token))

        with self.assertRaises(ApiError) as bad:
            c.acquire("a*b")
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "invalid_resource"))
        # Below twice lock.node_timeout (50 ms in dev): refused.
        with self.assertRaises(ApiError) as short:
            c.acquire("py-r", ttl_ms=1)
        self.assertEqual(short.exception.code, "ttl_out_of_range")

    def test_fence_is_passed_through_not_faked(self):
        # Today's agent has no fencing tokens: it refuses the field. Once it
        # has them, the grant carries one.
        try:
            grant = self.client.acquire("py-fenced", fence=True)
        except ApiError as e:
            self.assertEqual(e.code, "invalid_request")
            self.assertIn("fence", e.message)
        else:
            self.assertIsNotNone(grant.fence)
            self.client.release("py-fenced", grant.token)

    def test_an_absent_agent_is_unreachable(self):
        with tempfile.TemporaryDirectory() as d:
            client = Client(os.path.join(d, "nobody.sock"))
            with self.assertRaises(Unreachable) as e:
                client.nodes()
            self.assertIn("nobody.sock", str(e.exception))

    def test_a_hold_renews_and_releases_when_the_block_ends(self):
        c = self.client
        with c.hold("py-batch", ttl_ms=600, owner="py") as lock:
            first = lock.valid_until
            wait_for("a renewal", lambda: lock.valid_until > first)
            lock.check()
            self.assertFalse(lock.lost.is_set())
        # A TTL far longer than the wait: only the release lets this through.
        grant = c.acquire("py-batch", ttl_ms=30_000, wait_ms=5_000)
        self.assertTrue(c.release("py-batch", grant.token))

    def test_a_hold_hears_of_an_operator_force_release(self):
        c = self.client
        heard = []
        with self.assertRaises(LockLost) as raised:
            with c.hold("py-nightly", ttl_ms=2000, on_lost=heard.append) as lock:
                forced = self.admin.force_release("py-nightly")
                self.assertEqual(forced["deleted"], 3)
                self.assertTrue(lock.wait_lost(DEADLINE), "no loss notice")
                self.assertEqual(lock.lost_reason, "force_released")
                with self.assertRaises(LockLost):
                    lock.check()
        self.assertEqual(raised.exception.reason, "force_released")
        # on_lost runs on the reader thread, just after `lost` is set.
        wait_for("the on_lost callback", lambda: heard)
        self.assertEqual([e.reason for e in heard], ["force_released"])

    def test_a_hold_stops_on_its_own_clock_when_the_agent_is_frozen(self):
        # SIGSTOP: the agent keeps its socket but sends nothing, so neither
        # a renewal nor a loss notice arrives; the client's own deadline
        # (a twentieth of the validity before its end) must end the lock.
        with self.assertRaises(LockLost), self.client.hold("py-frozen", ttl_ms=1000) as lock:
            self.agent.process.send_signal(signal.SIGSTOP)
            try:
                self.assertTrue(lock.wait_lost(DEADLINE), "no local expiry")
            finally:
                self.agent.process.send_signal(signal.SIGCONT)
            self.assertEqual(lock.lost_reason, "expired")
            lock.check()
        # The agent answers again.
        wait_for("the agent to answer", lambda: self.client.nodes()["available"])

    def test_the_hold_example_prints_the_loss_notice(self):
        example = subprocess.Popen(
            [sys.executable, str(HERE / "example_hold.py"), self.agent.socket, "py-example"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            first = example.stdout.readline()
            self.assertTrue(first.startswith("held py-example"), first)
            self.admin.force_release("py-example")
            rest = example.communicate(timeout=DEADLINE)[0]
        finally:
            if example.poll() is None:
                example.kill()
                example.wait()
        self.assertEqual(example.returncode, 1)
        self.assertIn("stopped: the lock on py-example was lost: force_released", rest)


if __name__ == "__main__":
    unittest.main()
