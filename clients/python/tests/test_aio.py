"""The asyncio client against a real agent on three real redis-server
masters (`redlock-agent dev`): locks, a hold's loss after an operator's
force release, semaphores and elections."""

import asyncio
import tempfile
import os
import unittest

from redlock_client import (
    ApiError,
    LimitMismatch,
    LockLost,
    Lost,
    NoLeader,
    Taken,
    Unreachable,
)
from redlock_client.aio import AsyncClient
from support import DEADLINE, Agent, wait_for


async def eventually(what, condition):
    """Awaits `condition()` until it is true; fails after DEADLINE."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while not await condition():
        if loop.time() > end:
            raise AssertionError("timed out waiting for %s" % what)
        await asyncio.sleep(0.02)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    async def asyncSetUp(self):
        self.client = AsyncClient(self.agent.socket)
        self.admin = AsyncClient(self.agent.admin_socket)

        async def available():
            return (await self.client.nodes())["available"]

        await eventually("a usable quorum", available)

    async def test_acquire_extend_release_round_trip(self):
        c = self.client
        grant = await c.acquire("aio-orders", ttl_ms=10_000, owner="aio", fence=True)
        self.assertEqual((grant.resource, grant.ttl_ms), ("aio-orders", 10_000))
        self.assertTrue(grant.token.endswith(".aio"))
        self.assertIsInstance(grant.fence, int)
        with self.assertRaises(Taken):
            await c.acquire("aio-orders")
        extended = await c.extend("aio-orders", grant.token, ttl_ms=20_000)
        self.assertEqual(extended.ttl_ms, 20_000)
        self.assertTrue(await c.release("aio-orders", grant.token))
        self.assertFalse(await c.release("aio-orders", grant.token))
        with self.assertRaises(Lost):
            await c.extend("aio-orders", grant.token)
        with self.assertRaises(ApiError) as bad:
            await c.acquire("a*b")
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "invalid_resource"))

    async def test_a_waiter_does_not_block_the_event_loop(self):
        c = self.client
        held = await c.acquire("aio-queue", ttl_ms=30_000)
        waiter = asyncio.ensure_future(c.acquire("aio-queue", wait_ms=10_000))

        async def queued():
            locks = (await c.locks())["locks"]
            return any(l["resource"] == "aio-queue" and l["waiters"] == 1 for l in locks)

        await eventually("the waiter to queue", queued)
        self.assertTrue(await c.release("aio-queue", held.token))
        grant = await asyncio.wait_for(waiter, DEADLINE)
        self.assertTrue(await c.release("aio-queue", grant.token))

    async def test_an_absent_agent_is_unreachable(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(Unreachable) as e:
                await AsyncClient(os.path.join(d, "nobody.sock")).nodes()
            self.assertIn("nobody.sock", str(e.exception))

    async def test_a_hold_renews_and_releases_when_the_block_ends(self):
        c = self.client
        async with c.hold("aio-batch", ttl_ms=600) as lock:
            first = lock.valid_until

            async def renewed():
                return lock.valid_until > first

            await eventually("a renewal", renewed)
            lock.check()
        grant = await c.acquire("aio-batch", ttl_ms=30_000, wait_ms=5_000)
        self.assertTrue(await c.release("aio-batch", grant.token))

    async def test_a_hold_hears_of_an_operator_force_release(self):
        c = self.client
        heard = []
        cancelled = asyncio.Event()

        async def work():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with self.assertRaises(LockLost) as raised:
            async with c.hold("aio-nightly", ttl_ms=2000, on_lost=heard.append) as lock:
                guarded = asyncio.ensure_future(lock.guard(work()))
                await asyncio.sleep(0.05)
                forced = await self.admin.force_release("aio-nightly")
                self.assertEqual(forced["deleted"], 3)
                await guarded
        self.assertEqual(raised.exception.reason, "force_released")
        self.assertTrue(cancelled.is_set(), "the work was not cancelled")
        self.assertEqual([e.reason for e in heard], ["force_released"])

    async def test_semaphore_k_permits_then_taken_then_granted_after_a_release(self):
        c = self.client
        permits = [await c.acquire_permit("aio-sem", 2, ttl_ms=30_000) for _ in range(2)]
        self.assertEqual(sorted(p.permit for p in permits), [0, 1])
        with self.assertRaises(Taken):
            await c.acquire_permit("aio-sem", 2)
        with self.assertRaises(LimitMismatch):
            await c.acquire_permit("aio-sem", 3)
        waiter = asyncio.ensure_future(c.acquire_permit("aio-sem", 2, wait_ms=10_000))

        async def queued():
            return (await c.semaphore("aio-sem"))["waiters"] == 1

        await eventually("the waiter to queue", queued)
        self.assertTrue(await c.release_permit("aio-sem", permits[0].permit, permits[0].token))
        granted = await asyncio.wait_for(waiter, DEADLINE)
        self.assertEqual(granted.permit, permits[0].permit)
        for p in (permits[1], granted):
            self.assertTrue(await c.release_permit("aio-sem", p.token))

        async with c.hold_permit("aio-sem", 2, ttl_ms=600) as held:
            self.assertIn(held.permit, (0, 1))

    async def test_a_lock_on_several_resources_is_all_or_nothing_under_one_token(self):
        c = self.client
        grant = await c.acquire_many(["aio-many-b", "aio-many-a"], ttl_ms=10_000, fence=True)
        self.assertEqual(grant.resources, ["aio-many-a", "aio-many-b"])
        self.assertIsInstance(grant.fence, int)
        with self.assertRaises(Taken):
            await c.acquire("aio-many-b")
        self.assertEqual((await c.extend_many(grant.token, ttl_ms=20_000)).ttl_ms, 20_000)
        self.assertTrue(await c.release_many(grant.token))
        for name in grant.resources:
            single = await c.acquire(name)
            self.assertTrue(await c.release(name, single.token))

        async with c.hold_many(["aio-many-a", "aio-many-b"], ttl_ms=600) as held:
            self.assertEqual(held.resources, ["aio-many-a", "aio-many-b"])
            with self.assertRaises(Taken):
                await c.acquire("aio-many-a")
        single = await c.acquire("aio-many-a", ttl_ms=30_000, wait_ms=5_000)
        self.assertTrue(await c.release("aio-many-a", single.token))

    async def test_election_second_campaigner_leads_with_a_larger_term(self):
        c = self.client
        with self.assertRaises(NoLeader):
            await c.leader("aio-election")
        first = await c.campaign("aio-election", ttl_ms=2000, value="a")
        term = await asyncio.wait_for(first.wait_elected(), DEADLINE)
        self.assertEqual((await c.leader("aio-election")).term, term)
        async with c.observe("aio-election") as observer:
            events = observer.__aiter__()
            now = await asyncio.wait_for(events.__anext__(), DEADLINE)
            self.assertEqual((now.term, now.value), (term, "a"))
            async with c.campaign("aio-election", ttl_ms=2000, value="b") as second:

                async def waiting():
                    return second.leader is not None

                await eventually("the second to wait", waiting)
                self.assertFalse(second.is_leader)
                await first.resign()
                second_term = await asyncio.wait_for(second.wait_elected(), DEADLINE)
                self.assertGreater(second_term, term)
                while True:
                    seen = await asyncio.wait_for(events.__anext__(), DEADLINE)
                    if seen is not None and seen.term == second_term:
                        break
                self.assertEqual(seen.value, "b")


if __name__ == "__main__":
    unittest.main()
