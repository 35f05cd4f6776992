"""What a local swarm's report says its rounds cost comes from the members' own logs, in the
format the daemon writes them: the loss against the tokens the group trained on, the median
round split into inner steps, exchange and outer step, each member's throughput, and its
checkpoints (from its status)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from peertrain.node.cli.swarm_mesh_rounds import rounds_report
from peertrain.node.log_setup import JsonLines
from peertrain.swarm.diloco.group.driver import ROUND_CLOSED
from peertrain.swarm.diloco.group.progress import DriverProgress

SPEC = {
    "dataset": "tokens",
    "batch_size": 4,
    "inner_steps": 30,
    "dataset_settings": {"block_size": 256},
}
PER_UPDATE = 4 * 30 * 256  # tokens one member trains on in a round


@dataclass
class Daemon:
    log_path: Path


@dataclass
class Swarm:
    daemons: list[Daemon]
    statuses: list[dict[str, Any] | None]
    options: Any = field(default=None)


@dataclass
class Options:
    spec: dict[str, Any]


def closed_line(progress: DriverProgress, round_: int, loss: float, accepted: int) -> str:
    """The log line a member's driver writes when it closes a round."""
    entry = progress.closed(round_, loss, accepted, 0)
    record = logging.LogRecord("peertrain.swarm", logging.INFO, __file__, 1, "closed", (), None)
    record.event, record.fields = ROUND_CLOSED, entry
    return JsonLines().format(record)


def member_log(path: Path, rounds: list[tuple[int, float, int]], *, inner: float) -> Path:
    progress, lines = DriverProgress(), []
    for round_, loss, accepted in rounds:
        progress.outer_seconds = 0.5
        progress.timed(steps=30, compute=inner + 0.5, wall=inner + 0.5 + 2.0)
        lines.append(closed_line(progress, round_, loss, accepted))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_loss_curve_counts_the_tokens_of_every_update_the_creator_counted(tmp_path):
    creator = member_log(tmp_path / "node0.log", [(0, 5.0, 4), (1, 4.0, 4), (2, 3.5, 5)], inner=10)
    swarm = Swarm([Daemon(creator)], [None], Options(SPEC))
    report = rounds_report(swarm)
    assert report["curve_unit"] == "tokens"
    assert report["loss_curve"] == [
        {"round": 0, "trained": 4 * PER_UPDATE, "loss": 5.0},
        {"round": 1, "trained": 8 * PER_UPDATE, "loss": 4.0},
        {"round": 2, "trained": 13 * PER_UPDATE, "loss": 3.5},  # a late joiner's update too
    ]


def test_a_round_splits_into_inner_steps_exchange_and_outer_step(tmp_path):
    fast = member_log(tmp_path / "node0.log", [(0, 5.0, 2), (1, 4.0, 2)], inner=10)
    slow = member_log(tmp_path / "node1.log", [(0, 5.0, 2), (1, 4.0, 2)], inner=20)
    swarm = Swarm([Daemon(fast), Daemon(slow)], [None, None], Options(SPEC))
    report = rounds_report(swarm)
    assert report["round_split"] == {
        "inner_s": 15.0, "exchange_s": 2.0, "outer_s": 0.5, "round_s": 17.5
    }  # fmt: skip
    fast_rate, slow_rate = report["throughput"]
    assert fast_rate["per_s_computing"] == pytest.approx(PER_UPDATE / 10, abs=0.1)
    assert fast_rate["per_s"] == pytest.approx(PER_UPDATE / 12.5, abs=0.1)
    assert slow_rate["per_s_computing"] == pytest.approx(PER_UPDATE / 20, abs=0.1)


def test_checkpoints_are_counted_timed_and_sized_from_the_status(tmp_path):
    progress = DriverProgress()
    progress.checkpointed(0.25, 100 << 20)
    progress.checkpointed(0.75, 100 << 20)
    status = {"run": {"progress": {"timing": progress.timing()}}}
    swarm = Swarm([Daemon(tmp_path / "none.log")] * 2, [status, None], Options(SPEC))
    assert rounds_report(swarm)["checkpoints"] == [
        {"node": 0, "written": 2, "mean_s": 0.5, "mb": 100.0},
        {"node": 1, "written": 0, "mean_s": None, "mb": 0.0},
    ]


def test_a_dataset_of_images_counts_samples_and_text_its_default_window(tmp_path):
    creator = member_log(tmp_path / "node0.log", [(0, 2.0, 3)], inner=1)
    digits = {"dataset": "digits", "batch_size": 32, "inner_steps": 20}
    report = rounds_report(Swarm([Daemon(creator)], [None], Options(digits)))
    assert report["curve_unit"] == "samples"
    assert report["loss_curve"] == [{"round": 0, "trained": 3 * 32 * 20, "loss": 2.0}]
    text = {"dataset": "text", "batch_size": 32, "inner_steps": 20}
    report = rounds_report(Swarm([Daemon(creator)], [None], Options(text)))
    assert report["loss_curve"][0]["trained"] == 3 * 32 * 20 * 64  # 64-byte windows
