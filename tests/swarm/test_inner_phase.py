"""A member's inner phase stops when the group closes its round: the late member computes nothing
that would not count, and starts the next round with the group instead of a phase behind it."""

from __future__ import annotations

from dataclasses import replace

import trio
from peertrain.swarm.data import DigitsDatasetConfig
from peertrain.swarm.diloco import DiLoCoMember, InnerConfig, InnerLoop, ProtocolCodec
from peertrain.swarm.diloco.group.inner_phase import inner_phase
from peertrain.swarm.models import MLPConfig

INNER = InnerConfig(steps=5, batch_size=32, lr=1e-2, warmup_steps=3)


def member(steps: int) -> DiLoCoMember:
    digits = DigitsDatasetConfig().build()
    return DiLoCoMember(
        MLPConfig(hidden=16, depth=1).build(seed=0),
        digits.train_batches(0, 1, batch_size=32, seed=0),
        inner=replace(INNER, steps=steps),
        codec=ProtocolCodec("int8"),
    )


def test_the_inner_loop_takes_no_step_after_it_is_told_to_stop():
    m = member(5)
    loop = InnerLoop(m.inner.model, m.inner.batches, INNER)
    told = iter([False, False, False, True])
    report = loop.run(10, stop=lambda: next(told))
    assert report.steps == 3 and loop.step == 3 and report.samples == 3 * 32


async def test_an_overtaken_member_abandons_its_inner_phase():
    m = member(steps=1_000_000)  # hours of steps: only the stop ends it
    started = trio.current_time()
    closed_at = started + 0.5  # the group closes the round half a second in

    payload = await inner_phase(
        m, trio.to_thread.run_sync, lambda: trio.current_time() >= closed_at
    )
    assert payload is None
    assert trio.current_time() - started < 5
    assert 0 < m.inner.step < 1_000_000
    assert m.snapshot().round == 0  # nothing prepared: the member restores or rewinds next


async def test_a_member_not_overtaken_prepares_its_update():
    m = member(steps=5)
    payload = await inner_phase(m, trio.to_thread.run_sync, lambda: False)
    assert payload is not None and m.inner.step == 5
