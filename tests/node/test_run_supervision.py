"""A run that fails is the run's problem, not the daemon's: its error shows in status, it is
restarted with backoff, a crash loop is quarantined, and the node goes on serving."""

from __future__ import annotations

import shutil

from peertrain.node.api.control import call
from peertrain.node.runs.lifecycle import quarantine_file
from peertrain.node.runs.manager import MAX_RUNS
from peertrain.testing import open_test_swarm, wait_until

SPEC = {
    "model": "mlp",
    "dataset": "digits",
    "batch_size": 32,
    "inner_steps": 5,
    "min_members": 1,
    "num_shards": 1,
    "rounds": 0,
}


def _break_the_disk(run_dir) -> None:
    """A real failure: the checkpoint folder becomes a file, so every save after a round fails
    (a full or broken disk does the same)."""
    checkpoints = run_dir / "checkpoints"
    shutil.rmtree(checkpoints, ignore_errors=True)
    checkpoints.write_text("not a folder")


async def test_a_failing_run_is_restarted_then_quarantined_and_the_daemon_serves_on():
    async with open_test_swarm(1) as (node,):
        manager = node.runs
        manager.supervisor.backoff_min = manager.supervisor.backoff_max = 0.2
        session = await manager.create(name="fragile", mode="diloco", spec=SPEC)
        run_dir = node.config.home / "runs" / session.run_id
        _break_the_disk(run_dir)
        await wait_until(lambda: node.status()["run"]["error"] is not None, timeout=30)
        assert "checkpoints" in node.status()["run"]["error"]
        await wait_until(
            lambda: quarantine_file(node.config.home, session.run_id).exists(), timeout=60
        )
        [health] = [s for s in manager.services() if s["name"].startswith("run ")]
        assert health["state"] == "quarantined" and health["restarts"] >= 2
        status = await call(node.config.control_socket, "status", timeout=5)
        assert not [s for s in status["services"] if s["state"] in ("restarting", "quarantined")], (
            status["services"]
        )
        assert len(manager._active()) == 0 < MAX_RUNS  # a quarantined run frees its slot


async def test_a_run_that_cannot_start_fails_the_call_and_leaves_nothing_behind():
    async with open_test_swarm(1) as (node,):
        reply = None
        try:
            await call(
                node.config.control_socket,
                "run.create",
                {"name": "x", "mode": "diloco", "spec": {"model": "no-such-model"}},
            )
        except Exception as exc:  # noqa: BLE001 - the error is what this test reads
            reply = str(exc)
        assert reply is not None and "no-such-model" in reply
        assert node.runs.sessions == {} and node.status()["run"] is None
