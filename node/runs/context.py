"""What a run's services work with: the node's services plus the run's own replicated state.

A session builds one `RunContext` and hands it to what it starts (the DiLoCo driver's adapters,
a pipeline server or trainer), so none of them needs the session or the daemon behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from peertrain.crdt.manifest import RunManifest
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState

from ..services.node_services import NodeServices
from .training_choices import TrainingChoices


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    node: NodeServices  # the node's infrastructure
    choices: TrainingChoices  # how this node trains (device, precision, ranks…)
    run_id: str
    manifest: RunManifest
    state: RunState  # this node's replica of the run's state
    replicator: Replicator  # gossips and anti-entropy-syncs `state`; announces our role
    directory: Path  # <home>/runs/<run id>: manifest, checkpoints
