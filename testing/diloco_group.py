"""A DiLoCo group in one process, for benchmarks and tests that simulate N workers.

`LocalGroup` steps every member in one thread: the same member code as in the daemon, with the
exchange collapsed into a list (every member prepares its payload, then every member applies the
full, sender-ordered set). `InProcessExchange` is the `UpdateExchange` for members running in
threads of their own, with a round deadline and late payloads dropped, as update gossip does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from peertrain.swarm.diloco.errors import RoundFailed
from peertrain.swarm.diloco.member.member import DiLoCoMember, RoundReport
from peertrain.swarm.exchange.interface import Contribution


class LocalGroup:
    def __init__(self, members: Sequence[DiLoCoMember], names: Sequence[str] | None = None) -> None:
        self.members = list(members)
        self.names = (
            list(names) if names is not None else [f"member-{i:03d}" for i in range(len(members))]
        )
        self.bytes_sent = 0  # total payload bytes published by all members

    def run_round(self) -> list[RoundReport]:
        payloads = [member.prepare_update() for member in self.members]
        self.bytes_sent += sum(len(p) for p in payloads)
        contributions = [
            Contribution(sender=n, payload=p) for n, p in zip(self.names, payloads, strict=True)
        ]
        return [member.apply_update(contributions) for member in self.members]


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
