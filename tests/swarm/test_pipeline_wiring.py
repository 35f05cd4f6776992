"""The stage dispatcher: work follows measured throughput; joins, failures and re-announcements."""

from __future__ import annotations

import random

import pytest
from peertrain.swarm.pipeline.errors import NoServerAvailable
from peertrain.swarm.pipeline.wiring import PipelineWiring, StageWiring, ThroughputEMA


def _simulate(wiring: StageWiring, speeds: dict[str, float], microbatches: int, seed: int) -> None:
    """Each microbatch: a forward then a backward; call time = work / speed with ±10% noise."""
    rng = random.Random(seed)
    batch = 16
    for _ in range(microbatches):
        for backward in (False, True):
            peer = wiring.choose(batch, backward=backward)
            work = batch * (wiring.backward_cost if backward else 1.0)
            seconds = work / speeds[peer] * rng.uniform(0.9, 1.1)
            wiring.record(peer, samples=batch, seconds=seconds, backward=backward)


def _shares(wiring: StageWiring) -> dict[str, float]:
    stats = {s.peer: s.samples for s in wiring.statistics()}
    total = sum(stats.values())
    return {peer: samples / total for peer, samples in stats.items()}


@pytest.mark.parametrize("speeds", [{"a": 1.0, "b": 2.0, "c": 4.0}, {"a": 3.0, "b": 1.0}])
def test_work_share_follows_throughput_share(speeds: dict[str, float]) -> None:
    wiring = StageWiring(seed=1)
    for peer in speeds:
        wiring.announce(peer)
    _simulate(wiring, speeds, microbatches=600, seed=2)
    total_speed = sum(speeds.values())
    for peer, share in _shares(wiring).items():
        target = speeds[peer] / total_speed
        assert abs(share - target) <= 0.05 * target, (peer, share, target)


def test_every_stage_of_a_pipeline_balances_independently() -> None:
    wiring = PipelineWiring(3, seed=5)
    stage_speeds = [{"a": 1.0, "b": 2.0}, {"c": 4.0, "d": 1.0}, {"e": 1.0, "f": 1.0, "g": 2.0}]
    for stage, speeds in zip(wiring.stages, stage_speeds, strict=True):
        for peer in speeds:
            stage.announce(peer)
        _simulate(stage, speeds, microbatches=500, seed=3)
        shares = _shares(stage)
        for peer, speed in speeds.items():
            target = speed / sum(speeds.values())
            assert abs(shares[peer] - target) <= 0.05 * target


def test_new_peer_enters_at_minimum_and_is_not_flooded() -> None:
    wiring = StageWiring(seed=0)
    speeds = {"a": 1.0, "b": 1.0}
    for peer in speeds:
        wiring.announce(peer)
    _simulate(wiring, speeds, microbatches=200, seed=0)
    before = {s.peer: s.tasks for s in wiring.statistics()}
    wiring.announce("new")
    speeds["new"] = 1.0
    _simulate(wiring, speeds, microbatches=30, seed=1)
    after = {s.peer: s.tasks for s in wiring.statistics()}
    new_tasks = after["new"]
    old_tasks = [after[p] - before[p] for p in ("a", "b")]
    # Entering at load 0 would have given it every task until it caught up (~400 tasks).
    assert new_tasks <= max(old_tasks) + 3
    assert new_tasks >= min(old_tasks) - 3


def test_failed_peer_is_excluded_until_it_reannounces() -> None:
    wiring = StageWiring(seed=0)
    for peer in ("a", "b"):
        wiring.announce(peer)
    wiring.exclude("a")
    assert {wiring.choose(4) for _ in range(20)} == {"b"}
    wiring.exclude("b")
    with pytest.raises(NoServerAvailable):
        wiring.choose(4)
    wiring.announce("a")
    assert wiring.choose(4) == "a"


def test_backward_costs_two_and_a_half_forwards() -> None:
    wiring = StageWiring(seed=0)
    wiring.announce("a")
    wiring.choose(10, backward=True)
    assert wiring.statistics()[0].samples == pytest.approx(25.0)


def test_ema_is_bias_corrected() -> None:
    ema = ThroughputEMA(beta=0.9)
    assert ema.value is None
    ema.update(2.0)
    assert ema.value == pytest.approx(2.0)  # uncorrected it would read 0.2
    for _ in range(50):
        ema.update(4.0)
    assert ema.value == pytest.approx(4.0, rel=0.02)
