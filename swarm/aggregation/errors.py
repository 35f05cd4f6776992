"""The aggregation branch of the error tree.

    PeertrainError
    └── SwarmError                      (swarm/errors.py)
        └── AggregationError            aggregation could not produce an update
            ├── AggregatorConfigError   unknown rule name, unknown option, or a value out of range
            └── NotEnoughUpdates        after validation too few inputs remain for the rule

Rejected inputs are not errors: they come back as per-input `Verdict`s so the caller can penalise
the sender and carry on. `NotEnoughUpdates` carries those verdicts too, for the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import SwarmError

if TYPE_CHECKING:
    from peertrain.swarm.aggregation.validation import Verdict


class AggregationError(SwarmError):
    """An aggregator could not produce an update."""


class AggregatorConfigError(AggregationError):
    """A rule was asked for by an unknown name, or with unknown or out-of-range options."""


class NotEnoughUpdates(AggregationError):
    """Too few inputs survived validation for the rule to run (e.g. Multi-Krum needs p > 2f + 2)."""

    def __init__(self, message: str, *, verdicts: Sequence[Verdict] = ()) -> None:
        super().__init__(message)
        self.verdicts: tuple[Verdict, ...] = tuple(verdicts)
