"""A whole DiLoCo group stepped in one thread: for benchmarks and tests that simulate N workers.

Same member code as in the daemon, with the exchange collapsed into a list: every member prepares
its payload, then every member applies the full, sender-ordered set of payloads.
"""

from __future__ import annotations

from collections.abc import Sequence

from peertrain.swarm.diloco.exchange import Contribution
from peertrain.swarm.diloco.member import DiLoCoMember, RoundReport


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
