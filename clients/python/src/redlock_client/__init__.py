"""A client of the redlock-agent socket API, standard library only.

The agent runs beside the application and serves distributed locks,
semaphores and leader elections (Redlock over N Redis masters) as
HTTP/1.1 + JSON on a Unix socket. This package is that API for Python 3.8+:
`Client` blocks, `redlock_client.aio.AsyncClient` is the same for asyncio.

    from redlock_client import Client, LockLost

    client = Client("/run/redlock/agent.sock")
    with client.hold("orders-42", ttl_ms=10_000, wait_ms=5_000, owner="billing") as lock:
        for step in work():
            lock.check()          # raises LockLost once the lock is lost
            step()
    # left the block: released on every master

`acquire` / `extend` / `release` map one-to-one to the API, as do the
calls of a lock on several resources at once (`acquire_many`,
`extend_many`, `release_many`, `hold_many`), the semaphore calls
(`acquire_permit`, `extend_permit`, `release_permit`, `hold_permit`) and
the election calls (`campaign`, `leader`, `observe`).
A hold keeps a lock (or a permit) for as long as it is open: the agent
renews it and a thread reads its event stream. Python cannot stop arbitrary
code from another thread, so a loss is reported where the code looks:
`check()` raises `LockLost`, `lost` is a `threading.Event`, `on_lost` is
called from the reader thread, and leaving the block raises `LockLost` if
the lock was lost inside it (the work may have overlapped another holder's).

A lock is exclusive (one holder) unless taken with `mode="shared"`: any
number of readers at once, while no exclusive holder has it; `locks()` and
`lock_info()` show its `mode` and its `readers`.

Names are given as they are; they are percent-encoded here, once.
`fence=True` asks the agent for a fencing token: the answer's `fence`, a
number larger than every earlier grant's, to pass to storage with each
write. An election's `term` is such a fence.
"""

from ._common import (
    DEFAULT_TIMEOUT,
    ApiError,
    Extended,
    Grant,
    Leader,
    LimitMismatch,
    LockLost,
    Lost,
    Mode,
    MultiGrant,
    NoLeader,
    NoQuorum,
    Permit,
    RedlockError,
    Taken,
    Unreachable,
    election_path,
    lock_path,
    semaphore_path,
)
from ._listing import LockInfo, Reader
from ._sync import Campaign, Client, Hold, Observer

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Grant",
    "MultiGrant",
    "Permit",
    "Extended",
    "Hold",
    "Campaign",
    "Observer",
    "Leader",
    "LockInfo",
    "Reader",
    "Mode",
    "RedlockError",
    "ApiError",
    "Taken",
    "Lost",
    "NoQuorum",
    "LimitMismatch",
    "NoLeader",
    "Unreachable",
    "LockLost",
    "lock_path",
    "semaphore_path",
    "election_path",
    "DEFAULT_TIMEOUT",
]
