"""The DiLoCo branch of the error tree.

    PeertrainError
    └── SwarmError                   (swarm/errors.py)
        └── DiLoCoError              a DiLoCo member could not do what was asked
            ├── RoundFailed          a round could not complete (exchange timed out, no update)
            ├── LoopClosed           a user's own training loop ended while a round needed it
            ├── LoopHalted           the driver halted a Streaming DiLoCo loop (caught in the
            │                        loop's own compute thread: it never leaves streaming_loop)
            └── CheckpointError      a checkpoint is missing, incomplete, or failed verification
                └── CheckpointCorrupt  its bytes do not hash to its name / recorded digests

Updates from peers that fail to decode are not errors here: they are counted as rejected in the
round's report and the round goes on without them.
"""

from __future__ import annotations

from ..errors import SwarmError


class DiLoCoError(SwarmError):
    """A DiLoCo member could not do what was asked."""


class RoundFailed(DiLoCoError):
    """A round could not complete."""


class CheckpointError(DiLoCoError):
    """A checkpoint is missing, incomplete, or failed verification."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint's bytes do not match the hashes that name and describe it."""


class LoopClosed(DiLoCoError):
    """A user's own training loop ended (`peertrain.DiLoCo.close()`) while a round needed it."""


class LoopHalted(DiLoCoError):
    """The streaming driver halted its loop (`StreamingLoop.halt`) to rewind and repair."""
