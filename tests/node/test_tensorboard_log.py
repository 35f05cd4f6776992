"""`--tensorboard DIR` (issue 32, item 10): a member logs its run's metrics per round to
TensorBoard event files, read back here as TensorBoard reads them; without the package the
option is refused in one line that names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest
from peertrain.testing import open_test_swarm, wait_until

SPEC = {
    "model": "mlp",
    "model_settings": {"hidden": 16, "depth": 1},
    "dataset": "digits",
    "inner_steps": 3,
    "rounds": 3,
    "batch_size": 16,
}
TAGS = {"loss", "round", "members", "samples_per_s", "inner_steps_per_s", "update_bytes_sent"}


def read_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of every event file under `folder`, as TensorBoard loads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


async def test_a_member_logs_each_rounds_loss_speed_and_update_bytes(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    folder = tmp_path / "tb"
    async with open_test_swarm(1, first={"tensorboard": str(folder)}) as (node,):
        session = await node.runs.create(name="tiny/../x", mode="diloco", spec=SPEC)
        await wait_until(lambda: session.status()["finished"], timeout=60, what="three rounds")
        final = session.status()
        run_folder = folder / f"tiny_.._x-{session.run_id[:12]}"  # a name is no path

        def logged() -> bool:
            scalars = read_scalars(run_folder) if run_folder.exists() else {}
            return scalars.get("round", [(0, 0)])[-1][0] == 3

        await wait_until(logged, timeout=10, what="round 3 in the event files")
    scalars = read_scalars(run_folder)
    assert TAGS <= set(scalars)
    # every round, though rounds of 3 inner steps on 64 features pass between two polls
    assert [step for step, _ in scalars["loss"]] == [1, 2, 3]
    assert scalars["round"] == [(1, 1.0), (2, 2.0), (3, 3.0)]  # one point per round, at its step
    assert scalars["loss"][-1][1] == pytest.approx(final["loss"])
    assert scalars["members"][-1][1] == 1
    assert scalars["samples_per_s"][-1][1] >= 0  # the member's report: as fresh as its lease
    timing = final["progress"]["timing"]
    assert scalars["inner_steps_per_s"][-1][1] == pytest.approx(timing["steps"] / timing["wall_s"])
    assert "update_bytes_received" in scalars
    assert scalars["update_bytes_sent"][-1][1] == final["bytes_published"] > 0
    assert list(folder.iterdir()) == [run_folder]


def test_without_tensorboard_the_option_is_refused_in_one_line_naming_the_extra(tmp_path):
    """As a fresh install without the extra: the package hidden from the CLI's interpreter."""
    hidden = (
        "import sys; sys.modules['tensorboard'] = None\n"
        "from peertrain.node.cli.main import main\n"
        f"sys.exit(main(['node', 'start', '--home', {str(tmp_path)!r}, '--tensorboard', 'tb']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", hidden], capture_output=True, text=True, timeout=60
    )
    message = result.stderr.strip()
    assert result.returncode == 1 and "\n" not in message and "Traceback" not in message
    assert "--tensorboard needs the tensorboard package" in message
    assert "pip install 'peertrain[tensorboard]'" in message
