"""The blocking client's semaphores and elections against a real agent on
three real redis-server masters (`redlock-agent dev`)."""

import threading
import unittest

from redlock_client import (
    ApiError,
    Client,
    LimitMismatch,
    LockLost,
    NoLeader,
    Taken,
)
from support import DEADLINE, Agent, wait_for


class PrimitivesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.client = Client(cls.agent.socket)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        wait_for("a usable quorum", lambda: self.client.nodes()["available"])

    def test_k_permits_then_taken_then_granted_after_a_release(self):
        c = self.client
        permits = [c.acquire_permit("py-sem", 3, ttl_ms=30_000, owner="w%d" % i) for i in range(3)]
        self.assertEqual(sorted(p.permit for p in permits), [0, 1, 2])
        self.assertEqual(len({p.token for p in permits}), 3)
        self.assertNotIn(permits[0].token, repr(permits[0]))
        listed = c.semaphore("py-sem")
        self.assertEqual((listed["limit"], len(listed["permits"])), (3, 3))
        self.assertNotIn(permits[0].token, str(listed))

        with self.assertRaises(Taken) as taken:
            c.acquire_permit("py-sem", 3)
        self.assertEqual((taken.exception.status, taken.exception.code), (409, "taken"))

        result = {}

        def wait():
            result["permit"] = c.acquire_permit("py-sem", 3, ttl_ms=30_000, wait_ms=10_000)

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_for("the waiter to queue", lambda: c.semaphore("py-sem")["waiters"] == 1)
        freed = permits.pop(1)
        self.assertTrue(c.release_permit("py-sem", freed.permit, freed.token))
        waiter.join(DEADLINE)
        granted = result["permit"]
        self.assertEqual(granted.permit, freed.permit)
        self.assertNotEqual(granted.token, freed.token)

        # A permit's token alone names it; the older (permit, token) still works.
        extended = c.extend_permit("py-sem", granted.token, ttl_ms=20_000)
        self.assertEqual(extended.ttl_ms, 20_000)
        self.assertEqual(c.extend_permit("py-sem", granted.permit, granted.token, 30_000).ttl_ms, 30_000)
        self.assertTrue(c.release_permit("py-sem", token=granted.token))
        for p in permits:
            self.assertTrue(c.release_permit("py-sem", p.token))
        self.assertEqual(c.semaphore("py-sem")["permits"], [])

    def test_another_limit_is_refused_while_permits_are_held(self):
        c = self.client
        held = c.acquire_permit("py-sem-limit", 2, ttl_ms=500)
        with self.assertRaises(LimitMismatch) as mismatch:
            c.acquire_permit("py-sem-limit", 5)
        self.assertEqual((mismatch.exception.status, mismatch.exception.code), (409, "limit_mismatch"))
        self.assertTrue(c.release_permit("py-sem-limit", held.permit, held.token))
        # The agent keeps the limit as long as the longest permit's TTL;
        # after it, any limit starts the semaphore afresh.
        again = []

        def afresh():
            try:
                again.append(c.acquire_permit("py-sem-limit", 5))
            except LimitMismatch:
                return False
            return True

        wait_for("the old limit to end", afresh)
        c.release_permit("py-sem-limit", again[0].permit, again[0].token)
        with self.assertRaises(ApiError) as bad:
            c.acquire_permit("py-sem-limit", 0)
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "invalid_request"))

    def test_a_permit_hold_names_its_permit_and_releases_on_close(self):
        c = self.client
        with c.hold_permit("py-sem-hold", 1, ttl_ms=600, fence=True) as permit:
            self.assertEqual(permit.permit, 0)
            self.assertIsInstance(permit.fence, int)
            first = permit.valid_until
            wait_for("a renewal", lambda: permit.valid_until > first)
            with self.assertRaises(Taken):
                c.acquire_permit("py-sem-hold", 1)
        granted = c.acquire_permit("py-sem-hold", 1, wait_ms=5_000)
        self.assertTrue(c.release_permit("py-sem-hold", granted.permit, granted.token))

    def test_a_second_campaigner_leads_after_the_first_resigns(self):
        c = self.client
        with self.assertRaises(NoLeader) as none:
            c.leader("py-election")
        self.assertEqual((none.exception.status, none.exception.code), (404, "no_leader"))

        first = c.campaign("py-election", ttl_ms=2000, owner="a", value="10.0.0.1:80")
        term = first.wait_elected(DEADLINE)
        self.assertIsInstance(term, int)
        self.assertTrue(first.is_leader)
        leader = c.leader("py-election")
        self.assertEqual((leader.term, leader.value, leader.owner), (term, "10.0.0.1:80", "a"))

        second = c.campaign("py-election", ttl_ms=2000, owner="b", value="10.0.0.2:80")
        try:
            wait_for("the second to wait", lambda: second.leader is not None)
            self.assertEqual(second.leader.term, term)
            self.assertIsNone(second.wait_elected(0.3))
            self.assertFalse(second.is_leader)

            first.resign()
            second_term = second.wait_elected(DEADLINE)
            self.assertGreater(second_term, term)
            wait_for("GET to name the second", lambda: c.leader("py-election").term == second_term)
            self.assertEqual(c.leader("py-election").value, "10.0.0.2:80")
        finally:
            second.close()
        wait_for("no leader", lambda: self._no_leader("py-election"))

    def test_an_observer_sees_each_leader_and_none(self):
        c = self.client
        seen = []
        with c.observe("py-observed") as observer:

            def read():
                for leader in observer:
                    seen.append(None if leader is None else leader.term)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            wait_for("the first event", lambda: seen)
            self.assertEqual(seen, [None])
            with c.campaign("py-observed") as campaign:
                term = campaign.wait_elected(DEADLINE)
                wait_for("the leader", lambda: term in seen)
            wait_for("no leader again", lambda: seen[-1] is None)
        reader.join(DEADLINE)

    def test_a_leader_hears_when_its_leadership_is_lost(self):
        c = self.client
        heard = []
        with self.assertRaises(LockLost) as raised:
            with c.campaign("py-ousted", ttl_ms=600, max_hold_ms=1500, on_lost=heard.append) as campaign:
                campaign.wait_elected(DEADLINE)
                self.assertTrue(campaign.wait_lost(DEADLINE), "no loss notice")
                self.assertFalse(campaign.is_leader)
                with self.assertRaises(LockLost):
                    campaign.check()
        self.assertEqual(raised.exception.reason, "max_hold")
        wait_for("on_lost", lambda: heard)

    def _no_leader(self, name):
        try:
            self.client.leader(name)
        except NoLeader:
            return True
        return False


if __name__ == "__main__":
    unittest.main()
