"""A local swarm run for a `--duration` stops killing members before its end, so the last one
killed is back in the run when the report is taken (the hour's diffusion run reported its
router at round 0: killed and restarted seconds before the end)."""

from __future__ import annotations

from peertrain.node.cli.swarm_mesh import LocalSwarmOptions, MeshSwarm


def quiet_end(duration: float, kill_every: float) -> float:
    options = LocalSwarmOptions(duration=duration, kill_every=kill_every)
    return MeshSwarm(options, base=None, console=None).quiet_end


def test_kills_stop_two_kill_periods_before_the_end():
    assert quiet_end(duration=4200, kill_every=120) == 240


def test_a_short_run_keeps_four_fifths_of_its_time_for_kills():
    assert quiet_end(duration=300, kill_every=120) == 60
