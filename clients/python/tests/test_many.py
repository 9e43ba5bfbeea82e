"""The blocking client's locks on several resources at once against a real
agent on three real redis-server masters (`redlock-agent dev`): all of
them or none under one token, and a hold of several that frees them all
when it closes."""

import unittest

from redlock_client import Client, LockLost, Lost, MultiGrant, Taken
from support import DEADLINE, Agent, wait_for


class ManyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.client = Client(cls.agent.socket)
        cls.admin = Client(cls.agent.admin_socket)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        wait_for("a usable quorum", lambda: self.client.nodes()["available"])

    def assert_free(self, *resources):
        """Each resource is granted alone at once, then released."""
        for resource in resources:
            grant = self.client.acquire(resource, ttl_ms=30_000, wait_ms=5_000)
            self.assertTrue(self.client.release(resource, grant.token))

    def test_two_resources_under_one_token_refuse_a_single_acquire_until_released(self):
        c = self.client
        grant = c.acquire_many(["py-many-b", "py-many-a"], ttl_ms=10_000, owner="py-many")
        self.assertIsInstance(grant, MultiGrant)
        self.assertEqual(grant.resources, ["py-many-a", "py-many-b"])
        self.assertEqual(grant.ttl_ms, 10_000)
        self.assertTrue(0 < grant.validity_ms <= 10_000)
        self.assertTrue(grant.token.endswith(".py-many"))
        self.assertNotIn(grant.token, repr(grant))

        for resource in grant.resources:
            with self.assertRaises(Taken) as taken:
                c.acquire(resource)
            self.assertEqual((taken.exception.status, taken.exception.code), (409, "taken"))
        # All or nothing: one taken resource refuses the whole request.
        with self.assertRaises(Taken):
            c.acquire_many(["py-many-a", "py-many-c"])
        self.assert_free("py-many-c")

        extended = c.extend_many(grant.token, ttl_ms=20_000)
        self.assertEqual(extended.ttl_ms, 20_000)
        self.assertGreater(extended.validity_ms, 10_000)

        self.assertTrue(c.release_many(grant.token))
        self.assert_free("py-many-a", "py-many-b")
        self.assertFalse(c.release_many(grant.token, resources=grant.resources))
        with self.assertRaises(Lost):
            c.extend_many(grant.token, resources=grant.resources)

    def test_resources_are_a_list_not_one_string(self):
        with self.assertRaises(TypeError):
            self.client.acquire_many("py-many-ab")

    def test_a_hold_of_several_resources_frees_them_all_when_it_closes(self):
        c = self.client
        with c.hold_many(["py-hold-b", "py-hold-a"], ttl_ms=600, fence=True) as lock:
            self.assertEqual(lock.resources, ["py-hold-a", "py-hold-b"])
            self.assertEqual(lock.resource, "py-hold-a,py-hold-b")
            self.assertIsInstance(lock.fence, int)
            first = lock.valid_until
            wait_for("a renewal", lambda: lock.valid_until > first)
            for resource in lock.resources:
                with self.assertRaises(Taken):
                    c.acquire(resource)
            lock.check()
        # A TTL far longer than the wait: only the release lets these through.
        self.assert_free("py-hold-a", "py-hold-b")

    def test_a_hold_of_several_hears_of_a_force_release_of_one(self):
        with self.assertRaises(LockLost) as raised:
            with self.client.hold_many(["py-forced-a", "py-forced-b"], ttl_ms=2000) as lock:
                self.admin.force_release("py-forced-b")
                self.assertTrue(lock.wait_lost(DEADLINE), "no loss notice")
        self.assertEqual(raised.exception.reason, "force_released")
        self.assert_free("py-forced-a", "py-forced-b")

    def test_release_through_the_hold_frees_them(self):
        c = self.client
        lock = c.hold_many(["py-rel-a", "py-rel-b"], ttl_ms=30_000)
        self.assertTrue(lock.release())
        self.assert_free("py-rel-a", "py-rel-b")


if __name__ == "__main__":
    unittest.main()
