"""The in-process run behind `peertrain swarm local --mode swarm` (the daemons' stage services and
trainer loops on a memory transport): its report, with a static phase and a kill."""

from __future__ import annotations

from peertrain.testing.pipeline_local_run import LocalRunConfig, run_local


async def test_local_run_with_a_kill_reports_no_loss_and_falling_loss() -> None:
    config = LocalRunConfig(
        nodes=6,
        stages=3,
        trainers=2,
        speeds=(1.0, 2.0),
        microbatches=240,
        in_flight=4,
        target_batch=64,
        base_seconds=2e-4,
        kill_at=0.3,
        static_seconds=0.5,
    )
    report = await run_local(config)
    data = report.to_json()
    for key in (
        "throughput",
        "ideal_throughput",
        "static_throughput",
        "lost_microbatches",
        "initial_loss",
        "final_loss",
        "stage_sizes",
    ):
        assert key in data
    assert report.killed == "s1-0"
    assert report.lost_microbatches == 0 and report.retries >= 1
    assert report.stage_sizes[0] == [2, 2, 2]
    assert report.final_loss < 0.7 * report.initial_loss
    assert 0 < report.throughput <= report.ideal_throughput * 1.05
    assert report.static_throughput is not None and report.static_throughput > 0
