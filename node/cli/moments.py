"""When a local swarm's one-off event comes (`--late-join S|rN`): seconds into the run, or a
round of the creator. Its own module: the CLI's parser imports it, and stays light."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Moment:
    """When a one-off event comes: `seconds` into the run, or once the creator is at `round`
    (the same point of a run on a fast machine and a slow one)."""

    seconds: float | None = None
    round: int | None = None

    def due(self, elapsed: float, creator_round: int | None) -> bool:
        if self.round is not None:
            return creator_round is not None and creator_round >= self.round
        return self.seconds is not None and elapsed >= self.seconds


def moment(text: str) -> Moment:
    """`--late-join`'s value: S (seconds, e.g. 90) or rN (once the creator is at round N)."""
    try:
        if text.startswith("r"):
            return Moment(round=int(text[1:]))
        return Moment(seconds=float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds (e.g. 90) or a round of the creator (e.g. r3)"
        ) from None
