"""A full disk (issue 33): a checkpoint that cannot be written is reported in the member's
progress (and so in status and the log), never costs an older checkpoint, and the run trains
on. The member's checkpoints live on a real 256 KiB tmpfs: room for two of the run's
checkpoints (109 KB each), not three."""

from __future__ import annotations

import os
import subprocess

import pytest
import trio
from peertrain.swarm.checkpoint_files import TMP_PREFIX
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.testing.diloco_drivers import digits_spec, open_driver_group

SPEC = digits_spec(rounds=5, inner_steps=4, min_members=2)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


async def test_a_full_disk_is_reported_keeps_the_older_checkpoints_and_the_run_trains_on(
    small_disk,
):
    store = CheckpointStore(small_disk, keep=3)
    async with open_driver_group(SPEC) as group:
        await group.member(group.creator)
        full = (await group.member(checkpoints=store)).driver
        with trio.fail_after(120):
            await group.finished()
        assert {d.member.round for d in group.drivers} == {5}
        assert len({d.member.state_hash() for d in group.drivers}) == 1
    assert full.progress.checkpoint_failures >= 1
    assert "No space left on device" in full.progress.checkpoint_error
    saved = store.list()
    assert saved and all(info.round < 5 for info in saved)  # the later ones did not fit
    newest, state = store.latest()  # what was written before the disk filled still loads
    assert newest.round == saved[-1].round and state.round == newest.round
    assert not list(small_disk.glob(TMP_PREFIX + "*"))  # no half-written file left behind
