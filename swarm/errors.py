"""The swarm layer's root of the error tree, and the errors shared by its packages.

    PeertrainError
    └── SwarmError                  the swarm layer could not do what was asked
        ├── ConfigError             a setting names an unknown key or holds an unusable value
        │   │                       (also a ValueError; node.errors.NodeConfigError refines it)
        │   └── SpecOverBudget      a run's model or data is bigger than this member agreed to
        ├── UnknownAttack           an attack asked for by an unknown name or with bad options
        ├── AggregationError        swarm/aggregation/errors.py
        ├── DiLoCoError             swarm/diloco/errors.py
        └── PipelineError           swarm/pipeline/errors.py

`ConfigError` lives here because swarm/ is the lowest layer with user settings to refuse (model,
dataset, optimizer, device); the node's config file errors subclass it, so one `except
ConfigError` catches a bad setting whichever layer read it.
"""

from __future__ import annotations

from peertrain.protocol.errors import PeertrainError


class SwarmError(PeertrainError):
    """The swarm layer (training policy, models, data, aggregation) could not do what was asked."""


class ConfigError(SwarmError, ValueError):
    """A config mapping names an unknown key or holds a value the component cannot use."""


class UnknownAttack(SwarmError):
    """An attack was asked for by an unknown name or with unknown options."""


class SpecOverBudget(ConfigError):
    """A run's model or dataset is bigger than this member agreed to hold."""
