"""Read-write locks, blocking and asyncio, against a real agent on three
real redis-server masters (`redlock-agent dev`): readers together, a writer
alone, the readers in the listing; and the check of a lock's mode, made
before any request is sent."""

import asyncio
import os
import tempfile
import unittest

from redlock_client import ApiError, Client, LockInfo, Taken, Unreachable
from redlock_client._common import wire_mode
from redlock_client.aio import AsyncClient
from support import Agent, wait_for


class ModeCheckTest(unittest.TestCase):
    """No agent: a socket that does not exist would raise Unreachable, so a
    ValueError says the mode was refused before any connection."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.socket = os.path.join(self.dir.name, "nobody.sock")

    def test_a_mode_other_than_shared_or_exclusive_is_refused_before_sending(self):
        c = Client(self.socket)
        for mode in ("read", "SHARED", "", None, 1):
            with self.subTest(mode=mode):
                with self.assertRaises(ValueError) as refused:
                    c.acquire("py-mode", mode=mode)
                self.assertIn("'shared' or 'exclusive'", str(refused.exception))
                with self.assertRaises(ValueError):
                    c.hold("py-mode", mode=mode)

    def test_the_two_modes_pass_and_exclusive_is_left_off_the_wire(self):
        # Left off, as the wire leaves off the default: an agent that
        # predates modes still takes an exclusive request.
        self.assertIsNone(wire_mode("exclusive"))
        self.assertEqual(wire_mode("shared"), "shared")
        for mode in ("shared", "exclusive"):
            with self.subTest(mode=mode):
                with self.assertRaises(Unreachable):
                    Client(self.socket).acquire("py-mode", mode=mode)

    def test_the_asyncio_client_refuses_it_too(self):
        c = AsyncClient(self.socket)
        with self.assertRaises(ValueError):
            asyncio.run(c.acquire("aio-mode", mode="write"))
        with self.assertRaises(ValueError):
            c.hold("aio-mode", mode="write")


class SharedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()
        cls.client = Client(cls.agent.socket)

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    def setUp(self):
        wait_for("a usable quorum", lambda: self.client.nodes()["available"])

    def test_two_shared_holds_are_granted_at_once_and_listed_as_two_readers(self):
        c = self.client
        with c.hold("py-rw-config", ttl_ms=10_000, owner="reader-1", mode="shared") as one:
            with c.hold("py-rw-config", ttl_ms=10_000, owner="reader-2", mode="shared") as two:
                self.assertEqual((one.mode, two.mode), ("shared", "shared"))
                self.assertNotEqual(one.token, two.token)
                one.check()
                two.check()
                info = c.lock_info("py-rw-config")
                self.assertIsInstance(info, LockInfo)
                self.assertEqual(info.mode, "shared")
                self.assertEqual(sorted(r.owner for r in info.readers), ["reader-1", "reader-2"])
                for reader in info.readers:
                    self.assertTrue(reader.held_here)
                    self.assertGreaterEqual(reader.masters, 2)
                self.assertIsNone(info.owner)
                listed = [l for l in c.locks()["locks"] if l.resource == "py-rw-config"]
                self.assertEqual([(l.mode, len(l.readers)) for l in listed], [("shared", 2)])
                self.assertEqual(listed[0]["mode"], "shared")
        # Both readers left: a writer is granted.
        grant = c.acquire("py-rw-config", ttl_ms=10_000, wait_ms=5_000)
        self.assertEqual(grant.mode, "exclusive")
        self.assertEqual(c.lock_info("py-rw-config").mode, "exclusive")
        self.assertTrue(c.release("py-rw-config", grant.token))

    def test_an_exclusive_acquire_is_taken_while_a_reader_holds_it(self):
        c = self.client
        with c.hold("py-rw-cache", ttl_ms=10_000, mode="shared"):
            with self.assertRaises(Taken):
                c.acquire("py-rw-cache", ttl_ms=10_000, wait_ms=0)
            with self.assertRaises(Taken):
                c.acquire("py-rw-cache", ttl_ms=10_000, wait_ms=0, mode="exclusive")

    def test_a_shared_acquire_is_taken_while_a_writer_holds_it(self):
        c = self.client
        writer = c.acquire("py-rw-schema", ttl_ms=10_000)
        with self.assertRaises(Taken):
            c.acquire("py-rw-schema", ttl_ms=10_000, wait_ms=0, mode="shared")
        with self.assertRaises(Taken):
            with c.hold("py-rw-schema", ttl_ms=10_000, wait_ms=0, mode="shared"):
                pass
        self.assertTrue(c.release("py-rw-schema", writer.token))
        reader = c.acquire("py-rw-schema", ttl_ms=10_000, wait_ms=5_000, mode="shared")
        self.assertEqual(reader.mode, "shared")
        self.assertIn("mode='shared'", repr(reader))
        self.assertTrue(c.release("py-rw-schema", reader.token))

    def test_a_shared_grant_is_reentered_by_its_token_in_its_own_mode_only(self):
        c = self.client
        grant = c.acquire("py-rw-again", ttl_ms=10_000, mode="shared")
        again = c.acquire("py-rw-again", ttl_ms=10_000, token=grant.token, mode="shared")
        self.assertEqual((again.token, again.hold_count, again.mode), (grant.token, 2, "shared"))
        with self.assertRaises(ApiError) as refused:
            c.acquire("py-rw-again", ttl_ms=10_000, token=grant.token)
        self.assertEqual((refused.exception.status, refused.exception.code), (409, "not_reentrant"))
        extended = c.extend("py-rw-again", grant.token, ttl_ms=20_000)
        self.assertEqual(extended.ttl_ms, 20_000)
        # The first release lowers the count; a hold re-enters it again.
        self.assertFalse(c.release("py-rw-again", grant.token))
        with c.hold("py-rw-again", ttl_ms=10_000, token=grant.token, mode="shared") as lock:
            self.assertEqual((lock.token, lock.hold_count, lock.mode), (grant.token, 2, "shared"))
        self.assertTrue(c.release("py-rw-again", grant.token))


class AsyncSharedTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent()

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()

    async def asyncSetUp(self):
        self.client = AsyncClient(self.agent.socket)
        blocking = Client(self.agent.socket)
        wait_for("a usable quorum", lambda: blocking.nodes()["available"])

    async def test_two_shared_holds_are_granted_at_once_and_listed_as_two_readers(self):
        c = self.client
        async with c.hold("aio-rw-config", ttl_ms=10_000, owner="reader-1", mode="shared") as one:
            async with c.hold(
                "aio-rw-config", ttl_ms=10_000, owner="reader-2", mode="shared"
            ) as two:
                self.assertEqual((one.mode, two.mode), ("shared", "shared"))
                info = await c.lock_info("aio-rw-config")
                self.assertEqual(info.mode, "shared")
                self.assertEqual(sorted(r.owner for r in info.readers), ["reader-1", "reader-2"])
                listed = [l for l in (await c.locks())["locks"] if l.resource == "aio-rw-config"]
                self.assertEqual([(l.mode, len(l.readers)) for l in listed], [("shared", 2)])
        grant = await c.acquire("aio-rw-config", ttl_ms=10_000, wait_ms=5_000)
        self.assertEqual(grant.mode, "exclusive")
        self.assertTrue(await c.release("aio-rw-config", grant.token))

    async def test_an_exclusive_acquire_is_taken_while_a_reader_holds_it(self):
        c = self.client
        reader = await c.acquire("aio-rw-cache", ttl_ms=10_000, mode="shared")
        self.assertEqual(reader.mode, "shared")
        with self.assertRaises(Taken):
            await c.acquire("aio-rw-cache", ttl_ms=10_000, wait_ms=0)
        self.assertTrue(await c.release("aio-rw-cache", reader.token))

    async def test_a_shared_acquire_is_taken_while_a_writer_holds_it(self):
        c = self.client
        async with c.hold("aio-rw-schema", ttl_ms=10_000) as writer:
            self.assertEqual(writer.mode, "exclusive")
            with self.assertRaises(Taken):
                await c.acquire("aio-rw-schema", ttl_ms=10_000, wait_ms=0, mode="shared")
        reader = await c.acquire("aio-rw-schema", ttl_ms=10_000, wait_ms=5_000, mode="shared")
        self.assertTrue(await c.release("aio-rw-schema", reader.token))


if __name__ == "__main__":
    unittest.main()
