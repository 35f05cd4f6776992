"""How a member hands its encoded update to the group and gets the round's updates back.

DiLoCo needs one collective per round: "here is my payload for round r; give me everyone's". The
member does not care how that happens, so the transport is injected:

- in the daemon, update gossip (announce, pull, deadline) runs on the trio event loop, between the
  member's two thread-side phases: `prepare_update()` → exchange → `apply_update(contributions)`;
- in tests and benchmarks, `InProcessExchange` connects members running in threads of one process.

Contributions carry the sender so that every member can order them the same way before aggregating:
float sums depend on order, and identical state hashes depend on identical sums. A member's own
payload comes back too, exactly as its peers received it (encoded), for the same reason.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import RoundFailed


@dataclass(frozen=True, slots=True, kw_only=True)
class Contribution:
    sender: str
    payload: bytes
    checksum: bytes = b""  # as its sender signed it (update gossip), for round records


class UpdateExchange(Protocol):
    """Blocking exchange, for members driven by `DiLoCoMember.run_round` in a worker thread."""

    def exchange(self, round_: int, payload: bytes) -> Sequence[Contribution]: ...


class InProcessExchange:
    """A rendezvous for `size` members in threads of one process; `endpoint(sender)` per member.

    A round closes when all `size` payloads are in, or `timeout` seconds after its first payload
    arrived, with whatever arrived. A member arriving after its round closed gets that round's
    contributions without its own (dropped, as gossip drops late updates), so it still ends the
    round in the same state as everyone else. Only the newest `history` rounds are kept, open or
    closed, so memory stays bounded; asking for an older round raises `RoundFailed`.
    """

    def __init__(self, size: int, *, timeout: float = 60.0, history: int = 4) -> None:
        self.size = size
        self.timeout = timeout
        self.history = history
        self._open: dict[int, dict[str, bytes]] = {}
        self._closed: dict[int, tuple[Contribution, ...]] = {}
        self._cond = threading.Condition()

    def endpoint(self, sender: str) -> _Endpoint:
        return _Endpoint(self, sender)

    def _exchange(self, sender: str, round_: int, payload: bytes) -> tuple[Contribution, ...]:
        with self._cond:
            if round_ not in self._closed:
                newest = max([*self._open, *self._closed], default=round_)
                if round_ <= newest - self.history:
                    raise RoundFailed(f"round {round_} is older than the last {self.history}")
                pending = self._open.setdefault(round_, {})
                pending[sender] = payload
                if len(pending) == self.size:
                    self._close(round_)
                elif not self._cond.wait_for(lambda: round_ in self._closed, self.timeout):
                    self._close(round_)
            return self._closed[round_]

    def _close(self, round_: int) -> None:
        pending = self._open.pop(round_)
        self._closed[round_] = tuple(
            Contribution(sender=s, payload=p) for s, p in sorted(pending.items())
        )
        for old in [r for r in self._closed if r <= round_ - self.history]:
            del self._closed[old]
        self._cond.notify_all()


@dataclass(frozen=True, slots=True)
class _Endpoint:
    hub: InProcessExchange
    sender: str

    def exchange(self, round_: int, payload: bytes) -> Sequence[Contribution]:
        return self.hub._exchange(self.sender, round_, payload)
