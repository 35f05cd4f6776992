"""The SWARM pipeline branch of the error tree.

PeertrainError
└── SwarmError                   (swarm/errors.py)
    └── PipelineError            a pipeline trainer or stage server could not do what was asked
        ├── NoServerAvailable    a stage has no live server left to try
        ├── ServerUnavailable    one call to one server failed (dead, timed out, refused); retry
        │                        the task on another server of the same stage
        ├── MicrobatchLost       a microbatch ran out of retries (counted, never silent)
        ├── WrongStage           a server was asked for a stage it does not serve (now)
        ├── NotServing           a server still starting was asked for its round or state
        └── StageCheckpointError a stage checkpoint is missing, unreadable or fails verification
"""

from __future__ import annotations

from ..errors import SwarmError


class PipelineError(SwarmError):
    """A pipeline trainer or stage server could not do what was asked."""


class NoServerAvailable(PipelineError):
    """A stage has no live server left to try."""


class ServerUnavailable(PipelineError):
    """A call to one stage server failed; the task may be retried elsewhere in the stage."""


class MicrobatchLost(PipelineError):
    """A microbatch could not be completed within its retry budget."""


class WrongStage(PipelineError):
    """A call asked a server for a stage it does not serve.

    `moved`: it served that stage a moment ago (a move raced the call: nobody is to blame);
    otherwise the caller asked the wrong server (an honest trainer may lag a move by a second,
    so the node's penalty for it is small)."""

    def __init__(self, message: str, *, moved: bool = False) -> None:
        super().__init__(message)
        self.moved = moved


class NotServing(PipelineError):
    """The server has not finished starting (no stage state yet); ask again later."""


class StageCheckpointError(PipelineError):
    """A stage checkpoint is missing, unreadable, or does not match its hashes."""
