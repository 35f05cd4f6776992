"""How a member hands its encoded update to the group and gets the round's updates back.

DiLoCo needs one collective per round: "here is my payload for round r; give me everyone's". The
member does not care how that happens, so the transport is injected:

- in the daemon, update gossip (announce, pull, deadline) runs on the trio event loop, between the
  member's two thread-side phases: `prepare_update()` → exchange → `apply_update(contributions)`;
- in tests and benchmarks, `peertrain.testing.InProcessExchange` connects members running in
  threads of one process (`peertrain.testing.LocalGroup`: a whole group in one thread).

Contributions carry the sender so that every member can order them the same way before aggregating:
float sums depend on order, and identical state hashes depend on identical sums. A member's own
payload comes back too, exactly as its peers received it (encoded), for the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Contribution:
    sender: str
    payload: bytes
    checksum: bytes = b""  # as its sender signed it (update gossip), for round records


class UpdateExchange(Protocol):
    """Blocking exchange, for members driven by `DiLoCoMember.run_round` in a worker thread."""

    def exchange(self, round_: int, payload: bytes) -> Sequence[Contribution]: ...
