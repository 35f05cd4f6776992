"""Whose update is somebody else's: near-duplicates within a round and replays of the last one.

A copier sends an update it did not compute: another member's of this round (it pulls the
counted updates like everyone) or one of the last round (its own or anyone's). Its held-out gain
is as good as the original's, so gains alone would credit it. Two independent runs of inner
steps from one start state never agree to a cosine of `COPY_COSINE`, not even on one shard (two
honest members on one small digits shard reached 0.95: 0.95 flagged them); a copy, re-quantised
or sent as it came, does.

Cosines are taken on a sketch: `SKETCH` coordinates drawn once per model size by a fixed seed,
so a round compares p updates in O(p² · SKETCH) whatever the model's size, and the last round's
sketches (not its updates) are all that is kept. Within a pair of near-duplicates a counted
member keeps its credit against a candidate (the candidate copied it: copies of a round's
counted updates are what a copier can pull); between two candidates, or two counted members,
the one that fits its own shard best (probe.py's `fit`: the original was trained there) does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import torch

from .probe import Gain
from .rating import COPY, REPLAY

COPY_COSINE = 0.995
SKETCH = 4096
MAX_REMEMBERED = 256  # last round's sketches kept (one per rated sender)


class CopyFinder:
    """Flags copies among one round's updates and replays of the last round's."""

    def __init__(self, numel: int, *, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        size = min(SKETCH, numel)
        self.index = torch.randint(numel, (size,), generator=generator)
        self.last: dict[str, torch.Tensor] = {}  # the last scored round's sketches

    def sketch(self, delta: torch.Tensor) -> torch.Tensor:
        s = delta.detach().reshape(-1)[self.index].float()
        norm = s.norm()
        return s / norm if torch.isfinite(norm) and norm > 0 else torch.zeros_like(s)

    def flags(
        self,
        deltas: Mapping[str, torch.Tensor],
        gains: Mapping[str, Gain],
        counted: Collection[str] = (),
    ) -> dict[str, str]:
        """sender → COPY or REPLAY for the updates that are not their sender's own work; then
        this round's sketches replace the last round's."""
        sketches = {p: self.sketch(d) for p, d in sorted(deltas.items())}
        out: dict[str, str] = {}
        last = list(self.last.values())
        if last:
            previous = torch.stack(last)
            for peer, s in sketches.items():
                if s.any() and float((previous @ s).max()) >= COPY_COSINE:
                    out[peer] = REPLAY
        peers = [p for p in sketches if sketches[p].any()]
        for i, a in enumerate(peers):
            for b in peers[i + 1 :]:
                if float(sketches[a] @ sketches[b]) >= COPY_COSINE:
                    copier = min((a, b), key=lambda p: (p in counted, _fit(gains.get(p)), p))
                    out.setdefault(copier, COPY)
        self.last = dict(list(sketches.items())[:MAX_REMEMBERED])
        return out


def _fit(gain: Gain | None) -> float:
    return gain.fit if gain is not None and gain.fit == gain.fit else float("-inf")
