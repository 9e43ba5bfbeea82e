"""What the agent shows of the locks on its masters (`GET /v1/locks` and
`GET /v1/locks/{resource}`) as typed objects: a lock and, when readers
hold it, each reader. Never a token. No I/O here.

Each is the dict of its wire fields, as `locks()` always answered (so
`lock["resource"]` and `json.dumps` keep working), with attributes that
say what a field left out means (`mode` is `exclusive` when absent)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ._common import Mode


class Reader(Dict[str, Any]):
    """One reader of a lock held shared: `agent` (the `agent.name` of the
    agent that granted it) and `owner` (None when not given), `masters`
    (the masters on which this reader is recorded, of those read) and
    `held_here` (granted through this agent and not released)."""

    @property
    def agent(self) -> Optional[str]:
        return self.get("agent")

    @property
    def owner(self) -> Optional[str]:
        return self.get("owner")

    @property
    def masters(self) -> int:
        return int(self.get("masters", 0))

    @property
    def held_here(self) -> bool:
        return bool(self.get("held_here", False))


class LockInfo(Dict[str, Any]):
    """One lock found on the masters. `mode` is `shared` when readers hold
    it, and `readers` names them (then `owner` and `agent` are None);
    `exclusive` when one holder does, with no readers. `validity_ms` is
    None without a quorum; `nodes` has one `{node, state, pttl_ms}` per
    master in config order (`state`: `held`, `missing`, `other` or
    `unknown`, for a master that could not be read)."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        super().__init__(fields)
        if "readers" in self:
            self["readers"] = [Reader(reader) for reader in self["readers"]]

    @property
    def resource(self) -> str:
        return str(self["resource"])

    @property
    def mode(self) -> Mode:
        mode: Mode = self.get("mode", "exclusive")
        return mode

    @property
    def readers(self) -> List[Reader]:
        readers: List[Reader] = self.get("readers", [])
        return readers

    @property
    def owner(self) -> Optional[str]:
        return self.get("owner")

    @property
    def agent(self) -> Optional[str]:
        return self.get("agent")

    @property
    def validity_ms(self) -> Optional[int]:
        return self.get("validity_ms")

    @property
    def quorum_agrees(self) -> bool:
        return bool(self.get("quorum_agrees", False))

    @property
    def held_here(self) -> bool:
        return bool(self.get("held_here", False))

    @property
    def waiters(self) -> int:
        return int(self.get("waiters", 0))

    @property
    def held_with(self) -> List[str]:
        """Every resource of the lock on several this one was granted with,
        sorted; empty for a lock of one resource."""
        held_with: List[str] = self.get("held_with", [])
        return held_with

    @property
    def nodes(self) -> List[Dict[str, Any]]:
        nodes: List[Dict[str, Any]] = self.get("nodes", [])
        return nodes


def lock_listing(answer: Dict[str, Any]) -> Dict[str, Any]:
    """The answer to `GET /v1/locks` with each of its `locks` a LockInfo."""
    answer["locks"] = [LockInfo(lock) for lock in answer.get("locks", [])]
    return answer
