"""The diffusion branch of the error tree.

PeertrainError
└── SwarmError                   (swarm/errors.py)
    ├── ConfigError              a diffusion setting is unknown or unusable (swarm/errors.py)
    └── DiffusionError           the diffusion experts could not do what was asked
        ├── DatasetMissing       an image dataset's files are not on this machine
        └── PartitionError       a data partition cannot be built or used
            └── PartitionCorrupt its bytes do not hash to the digest that names it
"""

from __future__ import annotations

from ..errors import SwarmError


class DiffusionError(SwarmError):
    """Training or sampling the diffusion experts could not do what was asked."""


class DatasetMissing(DiffusionError):
    """An image dataset's files are not installed; the message names what to install."""


class PartitionError(DiffusionError):
    """A data partition cannot be built (too few items for the clusters asked) or applied."""


class PartitionCorrupt(PartitionError):
    """A partition artifact's bytes do not hash to its digest, or do not parse."""
