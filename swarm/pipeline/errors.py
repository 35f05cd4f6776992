"""The SWARM pipeline branch of the error tree.

PeertrainError
└── SwarmError                   (swarm/errors.py)
    └── PipelineError            a pipeline trainer or stage server could not do what was asked
        ├── NoServerAvailable    a stage has no live server left to try
        ├── ServerUnavailable    one call to one server failed (dead, timed out, refused); retry
        │                        the task on another server of the same stage
        └── MicrobatchLost       a microbatch ran out of retries (counted, never silent)
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
