"""The blocking client's locks and holds against a real agent on three real
redis-server masters (`redlock-agent dev`), started once for these tests.

    python3 -m unittest discover -v -s tests     # in clients/python, installed
"""

import os
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
from support import DEADLINE, EXAMPLES, Agent, wait_for


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.client = Client(cls.agent.socket)
        cls.admin = Client(cls.agent.admin_socket)

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

    def test_a_fenced_write_carries_a_larger_fence_each_grant(self):
        c = self.client
        first = c.acquire("py-fenced", fence=True)
        self.assertIsInstance(first.fence, int)
        self.assertTrue(c.release("py-fenced", first.token))
        second = c.acquire("py-fenced", fence=True)
        self.assertGreater(second.fence, first.fence)
        self.assertTrue(c.release("py-fenced", second.token))
        # Not asked for: none (unless the agent mints them always).
        plain = c.acquire("py-unfenced")
        self.assertIsNone(plain.fence)
        c.release("py-unfenced", plain.token)
        with c.hold("py-fenced", fence=True) as lock:
            self.assertGreater(lock.fence, second.fence)

    def test_a_lock_is_reentered_with_its_token(self):
        c = self.client
        grant = c.acquire("py-reentrant", ttl_ms=10_000, fence=True)
        self.assertIsNone(grant.hold_count)
        again = c.acquire("py-reentrant", ttl_ms=10_000, token=grant.token)
        self.assertEqual((again.token, again.hold_count, again.fence), (grant.token, 2, grant.fence))
        # The first release lowers the count: still held.
        self.assertFalse(c.release("py-reentrant", grant.token))
        with self.assertRaises(Taken):
            c.acquire("py-reentrant")
        self.assertTrue(c.release("py-reentrant", grant.token))
        with self.assertRaises(ApiError) as refused:
            c.acquire("py-reentrant", token=grant.token)
        self.assertEqual(refused.exception.code, "not_reentrant")

        # A hold re-enters too: closing it lowers the count as a release does.
        grant = c.acquire("py-reentrant", ttl_ms=10_000)
        with c.hold("py-reentrant", ttl_ms=10_000, token=grant.token) as lock:
            self.assertEqual((lock.token, lock.hold_count), (grant.token, 2))
        with self.assertRaises(Taken):
            c.acquire("py-reentrant")
        self.assertTrue(c.release("py-reentrant", grant.token))

        # A re-entering hold's release is its close: one release, not two,
        # so the first acquire still holds the lock and releases it.
        grant = c.acquire("py-reentrant", ttl_ms=10_000)
        lock = c.hold("py-reentrant", ttl_ms=10_000, token=grant.token)
        self.assertEqual(lock.hold_count, 2)
        self.assertTrue(lock.release())
        with self.assertRaises(Taken):
            c.acquire("py-reentrant")
        self.assertTrue(c.release("py-reentrant", grant.token))

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
            [sys.executable, str(EXAMPLES / "hold.py"), self.agent.socket, "py-example"],
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
