"""Streams end when they should, in both clients, against a socket that
plays the agent: it answers every request with a stream of the events it is
given and then stays silent, holding the connection open. A silent agent
ends a hold on the client's own clock (`expired`); closing a stream from
the code that opened it (or, blocking, from another thread) ends its reader
and counts no loss."""

import asyncio
import json
import os
import socket
import tempfile
import threading
import unittest

from redlock_client import Client, LockLost
from redlock_client.aio import AsyncClient

DEADLINE = 15.0


class SilentAgent:
    """A Unix socket answering each request with `events` as a chunked
    NDJSON stream, then nothing until it is stopped."""

    def __init__(self, *events):
        self.dir = tempfile.TemporaryDirectory(prefix="redlock-streams-")
        self.socket = os.path.join(self.dir.name, "agent.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket)
        self.listener.listen(8)
        self.events = events
        self.connections = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed by stop()
            self.connections.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for event in self.events:
                line = json.dumps(event).encode() + b"\n"
                conn.sendall(b"%x\r\n%s\r\n" % (len(line), line))

    def stop(self):
        self.listener.close()
        for conn in self.connections:
            conn.close()
        self.dir.cleanup()


ACQUIRED = {"event": "acquired", "token": "t.silent", "ttl_ms": 600, "validity_ms": 590}
LEADER = {"event": "leader", "election": "e", "term": 7, "validity_ms": 1000}


class BlockingStreamsTest(unittest.TestCase):
    def test_a_hold_on_a_silent_agent_expires_on_its_own_clock(self):
        agent = SilentAgent(ACQUIRED)
        self.addCleanup(agent.stop)
        heard = []
        called = threading.Event()

        def on_lost(e):
            heard.append(e.reason)
            called.set()

        with self.assertRaises(LockLost) as raised:
            with Client(agent.socket).hold("silent", on_lost=on_lost) as lock:
                self.assertTrue(lock.wait_lost(DEADLINE), "no local expiry")
        self.assertEqual(raised.exception.reason, "expired")
        # on_lost runs on the reader thread, just after `lost` is set.
        self.assertTrue(called.wait(DEADLINE), "no on_lost call")
        self.assertEqual(heard, ["expired"])

    def test_closing_a_hold_ends_its_reader_and_is_no_loss(self):
        agent = SilentAgent(dict(ACQUIRED, ttl_ms=60_000, validity_ms=59_000))
        self.addCleanup(agent.stop)
        lock = Client(agent.socket).hold("silent")
        lock.close()
        lock._reader.join(DEADLINE)
        self.assertFalse(lock._reader.is_alive(), "the reader thread still runs")
        self.assertFalse(lock.lost.is_set())

    def test_closing_an_observer_from_another_thread_ends_its_iteration(self):
        agent = SilentAgent(LEADER)
        self.addCleanup(agent.stop)
        seen = []
        first = threading.Event()
        observer = Client(agent.socket).observe("e")

        def read():
            for leader in observer:
                seen.append(leader.term)
                first.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.assertTrue(first.wait(DEADLINE), "no first event")
        observer.close()
        reader.join(DEADLINE)
        self.assertFalse(reader.is_alive(), "the iteration did not end")
        self.assertEqual(seen, [7])


class AsyncStreamsTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_hold_on_a_silent_agent_expires_on_its_own_clock(self):
        agent = SilentAgent(ACQUIRED)
        self.addCleanup(agent.stop)
        with self.assertRaises(LockLost) as raised:
            async with AsyncClient(agent.socket).hold("silent") as lock:
                lost = await asyncio.wait_for(lock.wait_lost(), DEADLINE)
                self.assertEqual(lost.reason, "expired")
        self.assertEqual(raised.exception.reason, "expired")

    async def test_closing_a_hold_ends_its_reader_and_is_no_loss(self):
        agent = SilentAgent(dict(ACQUIRED, ttl_ms=60_000, validity_ms=59_000))
        self.addCleanup(agent.stop)
        lock = await AsyncClient(agent.socket).hold("silent")
        await lock.close()
        self.assertTrue(lock._reader.done())
        self.assertFalse(lock.lost.is_set())


if __name__ == "__main__":
    unittest.main()
