"""`peertrain status` says in one line what a node does in a SWARM pipeline run."""

from __future__ import annotations

from peertrain.node.cli import _swarm_line


def test_a_server_line_names_its_stage_and_speed():
    run = {
        "role": "server",
        "phase": "serving",
        "stage": 1,
        "throughput": 123.45,
        "calls": 40,
        "steps": 3,
        "stage_sizes": [2, 1, 2],
    }
    assert (
        _swarm_line(run)
        == "server (serving)  serving stage 1  123.5 samples/s  40 calls  3 steps  stages 2/1/2"
    )


def test_a_trainer_line_shows_progress_loss_and_losses():
    run = {
        "role": "trainer",
        "phase": "swarm",
        "completed": 150,
        "throughput": 80.0,
        "loss": 0.91234,
        "lost_microbatches": 0,
        "stage_sizes": [2, 2, 2],
    }
    assert (
        _swarm_line(run)
        == "trainer (swarm)  150 microbatches  80.0 samples/s  loss 0.9123  lost 0  stages 2/2/2"
    )


def test_a_session_still_starting_has_a_line_too():
    assert _swarm_line({"role": "server", "phase": "starting", "stage_sizes": [1, 0]}) == (
        "server (starting)  loading the model  stages 1/0"
    )
