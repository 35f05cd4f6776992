"""The training arms of benchmarks/diloco_quality.py: one function per arm, one trial per call.

Every trial trains from the same initial weights on the same token windows, stops at 3/4 of its
steps to measure the validation loss (the ranking check), trains on, and is measured on the
validation half (what the sweep picks by) and the test half (what the table reports) of the
held-out chunks. Streaming arms are evaluated on θ_global, the state the members agree on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from peertrain.swarm.data import ConcatBatches, InterleavedBatches
from peertrain.swarm.diloco import (
    DiLoCoMember,
    InnerConfig,
    InnerLoop,
    OuterConfig,
    ParamLayout,
    ProtocolCodec,
    StreamingConfig,
    StreamingMember,
    data_parallel_bytes,
    evaluate,
)
from peertrain.swarm.models import GPTConfig, count_parameters
from peertrain.testing import LocalGroup, StreamingGroup


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    workers: int
    steps: int
    batch_size: int
    warmup: int
    seed: int
    model: GPTConfig
    dataset: object
    val: list
    test: list


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    arm: str
    inner_lr: float
    outer_lr: float | None
    val_early: float  # validation loss at 3/4 of the steps
    val: float
    test: float
    tokens: int
    sent_bytes: int
    peak_bytes: int  # the largest payload one member sent in one exchange
    seconds: float
    cpu_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Arm:
    """What an arm trains: `kind` dp | single | diloco | stream, and its settings."""

    name: str
    kind: str
    h: int = 0
    codec: str = "fp32"
    streaming: StreamingConfig | None = None


def early_steps(setup: Setup, h: int = 1) -> int:
    """3/4 of the steps, rounded down to whole rounds of `h`."""
    return max(h, (3 * setup.steps // 4) // h * h)


def inner_config(setup: Setup, lr: float, total: int, h: int = 100) -> InnerConfig:
    """AdamW with warm-up and cosine to lr/10 over `total` steps: the same for every arm."""
    return InnerConfig(
        steps=h,
        batch_size=setup.batch_size,
        lr=lr,
        warmup_steps=setup.warmup,
        total_steps=total,
        min_lr=lr / 10,
    )


def shard(setup: Setup, index: int):
    return setup.dataset.train_batches(
        index, setup.workers, batch_size=setup.batch_size, seed=setup.seed
    )


def run_trial(setup: Setup, arm: Arm, inner_lr: float, outer_lr: float | None) -> Trial:
    started, cpu_started = time.perf_counter(), time.process_time()
    train = {"dp": _data_parallel, "single": _single, "diloco": _diloco, "stream": _stream}
    val_early, model, tokens, sent, peak = train[arm.kind](setup, arm, inner_lr, outer_lr)
    return Trial(
        arm=arm.name,
        inner_lr=inner_lr,
        outer_lr=outer_lr,
        val_early=val_early,
        val=evaluate(model, setup.val),
        test=evaluate(model, setup.test),
        tokens=tokens,
        sent_bytes=sent,
        peak_bytes=peak,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )


def _data_parallel(setup: Setup, arm: Arm, lr: float, _outer):
    """W workers averaging gradients each step: one model on the W shards' batches together."""
    model = setup.model.build(seed=setup.seed)
    batches = ConcatBatches([shard(setup, i) for i in range(setup.workers)])
    loop = InnerLoop(model, batches, inner_config(setup, lr, setup.steps))
    early = early_steps(setup)
    loop.run(early)
    val_early = evaluate(model, setup.val)
    loop.run(setup.steps - early)
    tokens = setup.steps * batches.batch_size * setup.model.block_size
    n = count_parameters(model)
    sent = data_parallel_bytes(n, steps=setup.steps, members=setup.workers)
    return val_early, model, tokens, sent, 4 * n


def _single(setup: Setup, arm: Arm, lr: float, _outer):
    """One worker on every arm's tokens: W·T steps walking the W shards in turn."""
    model = setup.model.build(seed=setup.seed)
    steps = setup.steps * setup.workers
    batches = InterleavedBatches([shard(setup, i) for i in range(setup.workers)])
    loop = InnerLoop(model, batches, inner_config(setup, lr, steps))
    early = early_steps(setup) * setup.workers
    loop.run(early)
    val_early = evaluate(model, setup.val)
    loop.run(steps - early)
    return val_early, model, steps * setup.batch_size * setup.model.block_size, 0, 0


def _diloco(setup: Setup, arm: Arm, lr: float, outer_lr: float):
    inner = inner_config(setup, lr, setup.steps, arm.h)
    members = [
        DiLoCoMember(
            setup.model.build(seed=setup.seed),
            shard(setup, i),
            inner=inner,
            outer=OuterConfig(lr=outer_lr),
            codec=ProtocolCodec(arm.codec),
        )
        for i in range(setup.workers)
    ]
    group = LocalGroup(members)
    early = early_steps(setup, arm.h) // arm.h
    for _ in range(early):
        group.run_round()
    val_early = evaluate(members[0].model, setup.val)
    for _ in range(setup.steps // arm.h - early):
        reports = group.run_round()
    if len({r.state_hash for r in reports}) != 1:
        raise AssertionError("DiLoCo members ended with different state hashes")
    peak = members[0].encoder.codec.payload_bytes(members[0].layout.numel)
    return val_early, members[0].model, _tokens(setup), group.bytes_sent, peak


def _stream(setup: Setup, arm: Arm, lr: float, outer_lr: float):
    assert arm.streaming is not None
    inner = inner_config(setup, lr, setup.steps, arm.h)
    members = [
        StreamingMember(
            setup.model.build(seed=setup.seed),
            shard(setup, i),
            inner=inner,
            streaming=arm.streaming,
            outer=OuterConfig(lr=outer_lr),
            codec=ProtocolCodec(arm.codec),
        )
        for i in range(setup.workers)
    ]
    group = StreamingGroup(members)
    early = early_steps(setup, arm.h)
    group.run(early)
    val_early = evaluate(_global_model(setup, members[0]), setup.val)
    group.run(setup.steps - early)
    group.finish()
    if len({tuple(m.fragment_hashes()) for m in members}) != 1:
        raise AssertionError("Streaming DiLoCo members ended with different fragment states")
    model = _global_model(setup, members[0])
    return val_early, model, _tokens(setup), group.bytes_sent, group.peak_exchange_bytes


def _global_model(setup: Setup, member: StreamingMember) -> torch.nn.Module:
    """A model holding θ_global, the state every member agrees on."""
    model = setup.model.build(seed=setup.seed)
    ParamLayout(model).load(member.global_params)
    return model


def _tokens(setup: Setup) -> int:
    return setup.workers * setup.steps * setup.batch_size * setup.model.block_size
