"""DiLoCo groups: H local AdamW steps per member, then an outer Nesterov step on the group's
aggregated pseudo-gradients (Douillard et al. 2023). The member is torch-side and synchronous;
the driver (driver.py, with state_sync.py, trust.py, roster.py) runs it in a node under trio
against transport interfaces, and runs its torch phases in worker threads::

    member = DiLoCoMember(model, dataset.train_batches(shard, n, batch_size=B, seed=seed),
                          inner=InnerConfig(steps=H), codec=ProtocolCodec("int8"),
                          aggregator=build_aggregator(name))
    payload = await trio.to_thread.run_sync(member.prepare_update, limiter=compute)
    contributions = await gossip.exchange(member.round, payload, deadline=...)
    report = await trio.to_thread.run_sync(member.apply_update, contributions, limiter=compute)
    # report.state_hash → RunState; member.snapshot() → CheckpointStore.save / a joiner's restore

`peertrain.testing.InProcessExchange` (threads) runs a whole group in one process;
`peertrain.testing.LocalGroup` runs one in a single thread.
"""

from __future__ import annotations

from peertrain.swarm.diloco.member.checkpoint import CheckpointInfo, CheckpointStore
from peertrain.swarm.diloco.member.config import InnerConfig, OuterConfig, StreamingConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.inner_loop import InnerLoop, InnerReport, evaluate, learning_rate
from peertrain.swarm.diloco.member.member import DiLoCoMember, MemberState, RoundReport
from peertrain.swarm.diloco.member.outer_step import NesterovOuterOptimizer
from peertrain.swarm.diloco.member.state_hash import state_hash
from peertrain.swarm.diloco.member.streaming import FragmentReport, StreamingMember
from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec, UpdateCodec
from peertrain.swarm.exchange.interface import Contribution, UpdateExchange
from peertrain.swarm.exchange.traffic import data_parallel_bytes

from .errors import CheckpointCorrupt, CheckpointError, DiLoCoError, RoundFailed

__all__ = [
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "Contribution",
    "DiLoCoError",
    "DiLoCoMember",
    "ErrorFeedbackEncoder",
    "FragmentReport",
    "InnerConfig",
    "InnerLoop",
    "InnerReport",
    "MemberState",
    "NesterovOuterOptimizer",
    "OuterConfig",
    "ParamLayout",
    "ProtocolCodec",
    "RoundFailed",
    "RoundReport",
    "StreamingConfig",
    "StreamingMember",
    "UpdateCodec",
    "UpdateExchange",
    "data_parallel_bytes",
    "evaluate",
    "learning_rate",
    "state_hash",
]
