"""The update exchange's branch of the error tree.

    PeertrainError
    └── SwarmError                   (swarm/errors.py)
        └── ExchangeError            the exchange could not do what was asked
            ├── ExchangeFailed       a round's exchange could not complete (no statistics for a
            │                        shard by the deadline, statistics disputed every attempt)
            └── FetchFailed          a payload could not be fetched from a peer (the transport's)

A peer's bad message is not an error here: it is refused, its signer penalised, and the round
goes on without it.
"""

from __future__ import annotations

from ..errors import SwarmError


class ExchangeError(SwarmError):
    """The update exchange could not do what was asked."""


class ExchangeFailed(ExchangeError):
    """A round's exchange could not complete."""


class FetchFailed(ExchangeError):
    """A payload could not be fetched from a peer (gone, or not serving it)."""
