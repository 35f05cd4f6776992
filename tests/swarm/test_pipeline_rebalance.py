"""Rebalancing: one deterministic mover per period, from the idlest stage to the busiest."""

from __future__ import annotations

from peertrain.swarm.pipeline.rebalance import (
    StageView,
    apply_move,
    plan_move,
    stage_for_new_peer,
)


def _view(
    sizes: list[int], speed: float = 1.0, demands: list[float] | None = None
) -> list[StageView]:
    demands = demands or [1.0] * len(sizes)
    names = iter(f"peer{i}" for i in range(sum(sizes)))
    return [
        StageView(demand=d, servers={next(names): speed for _ in range(n)})
        for n, d in zip(sizes, demands, strict=True)
    ]


def _run(stages: list[StageView], periods: int) -> list[list[int]]:
    history = []
    for period in range(periods):
        move = plan_move(stages, period)
        if move is not None:
            stages = apply_move(stages, move)
        history.append([len(s.servers) for s in stages])
    return history


def test_four_one_one_reaches_two_two_two_and_stays() -> None:
    history = _run(_view([4, 1, 1]), periods=20)
    assert history[2] == [2, 2, 2]  # within a few periods (one mover each)
    assert all(sizes == [2, 2, 2] for sizes in history[2:])


def test_one_mover_per_period() -> None:
    history = _run(_view([6, 0, 0]), periods=6)
    previous = [6, 0, 0]
    for sizes in history:
        moved = sum(abs(a - b) for a, b in zip(sizes, previous, strict=True))
        assert moved in (0, 2)
        previous = sizes
    assert history[-1] == [2, 2, 2]


def test_mover_is_deterministic_and_varies_with_period() -> None:
    stages = _view([5, 1, 1])
    assert plan_move(stages, 7) == plan_move(list(stages), 7)  # every peer computes the same
    movers = {plan_move(stages, period).peer for period in range(30)}  # type: ignore[union-attr]
    assert len(movers) > 1


def test_capacity_not_head_count_decides() -> None:
    # Stage 0 has one fast server (4), stages 1 and 2 two slow ones each: already balanced-ish.
    stages = [
        StageView(demand=1.0, servers={"fast": 4.0}),
        StageView(demand=1.0, servers={"a": 2.0, "b": 2.0}),
        StageView(demand=1.0, servers={"c": 2.0, "d": 2.0}),
    ]
    assert plan_move(stages, 0) is None
    # A deeper stage (demand 2) draws capacity to itself.
    deeper = _view([3, 3, 3], demands=[1.0, 1.0, 2.0])
    history = _run(deeper, periods=10)
    assert history[-1][2] > 3


def test_new_peer_joins_the_stage_with_most_need() -> None:
    assert stage_for_new_peer(_view([2, 1, 2])) == 1
    assert stage_for_new_peer(_view([2, 2, 2], demands=[1.0, 1.0, 3.0])) == 2
    assert stage_for_new_peer(_view([1, 0, 1])) == 1  # an empty stage needs a server most


def test_measurement_noise_does_not_unsettle_a_balanced_layout() -> None:
    # Equal servers at 2/2/2; stage 0's two were measured slow for a while (a busy machine):
    # moving a stage-2 server there would shave the worst load by ~10%, which no move pays for.
    noisy = [
        StageView(demand=1.0, servers={"a": 0.45, "b": 0.45}),
        StageView(demand=1.0, servers={"c": 1.0, "d": 1.0}),
        StageView(demand=1.0, servers={"e": 1.0, "f": 1.0}),
    ]
    assert all(plan_move(noisy, period) is None for period in range(10))
    # a real shortage (stage 0 a third as fast as the others) still draws a server
    slow = [
        StageView(demand=1.0, servers={"a": 0.3, "b": 0.3}),
        StageView(demand=1.0, servers={"c": 1.0, "d": 1.0}),
        StageView(demand=1.0, servers={"e": 1.0, "f": 1.0}),
    ]
    move = plan_move(slow, 0)
    assert move is not None and move.target == 0
