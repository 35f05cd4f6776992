"""Streaming DiLoCo end to end through the CLI: three daemons as processes, a run created with
`peertrain run create --fragments 2 --overlap 1 --round-seconds …`, one member on a machine three
times slower (the hidden `--slowdown 3`). Rounds are compute windows: nobody waits for the slow
member's deadline, its samples count, and every member ends on the same state per fragment."""

from __future__ import annotations

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import wait_until_sync

from .test_diloco_cli import create_run, join_args, run_of

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROUNDS = 3
ROUND_TIMEOUT = 30.0
STREAMING_FLAGS = [
    "--fragments",
    "2",
    "--overlap",
    "1",
    "--round-seconds",
    "1.5",
    # H sets only the pace a sample claim is clipped to: above what anyone takes in a window
    "--inner-steps",
    "4000",
    "--rounds",
    str(ROUNDS),
    "--round-timeout",
    str(ROUND_TIMEOUT),
    # a fast member takes ~500 steps a window and reaches its 600-sample shard's optimum in one,
    # so DiLoCo's Nesterov 0.9 (tuned for hundreds of rounds) overshoots within three and the
    # third round's loss rose above the first's on CI; plain under-relaxed averaging keeps
    # this test about windows and agreement, and lets it ask for real progress
    "--set",
    "outer_momentum=0.0",
]


def start_group(tmp_path) -> list[DaemonProcess]:
    first = DaemonProcess(tmp_path / "n0", node_args(), DAEMON_ENV).start()
    addr = first.wait_ready()["share"]
    create_run(first.home, "streaming", *STREAMING_FLAGS)
    daemons = [first]
    for index, extra in ((1, []), (2, ["--slowdown", "3"])):
        args = join_args(addr, "streaming") + extra
        daemons.append(DaemonProcess(tmp_path / f"n{index}", args, DAEMON_ENV).start())
    for daemon in daemons[1:]:
        daemon.wait_ready()
    return daemons


def test_a_member_three_times_slower_counts_and_all_agree_per_fragment(tmp_path):
    daemons = start_group(tmp_path)
    try:
        wait_until_sync(
            lambda: all((run_of(d) or {}).get("finished") for d in daemons), timeout=150, interval=1
        )
        runs = [run_of(d) for d in daemons]
        me = {"slow": _peer(daemons[2]), "fast": [_peer(d) for d in daemons[:2]]}
    finally:
        codes = stop_all(daemons)
    assert codes == [0, 0, 0]
    assert all(r["round"] == ROUNDS for r in runs)
    assert len({r["state_checksum"] for r in runs}) == 1
    fragments = [r["streaming"]["fragment_states"] for r in runs]
    assert [f["round"] for f in fragments[0]] == [ROUNDS, ROUNDS]
    assert all(f == fragments[0] for f in fragments)  # equal checksums, fragment by fragment
    slow, fast = runs[2]["streaming"], [r["streaming"] for r in runs[:2]]
    for r in runs:  # every member counted the slow member's samples, fewer than a fast one's
        counted = r["streaming"]["samples_by_member"]
        assert 0 < counted[me["slow"]] < 0.7 * min(counted[p] for p in me["fast"]), counted
    assert slow["loop"]["steps"] < 0.7 * min(f["loop"]["steps"] for f in fast)
    # no round waited for a deadline: a round is its 1.5 s window plus agreement
    for r in runs:
        took = r["streaming"]["round_durations"]
        assert len(took) == ROUNDS and max(took) < ROUND_TIMEOUT / 3, took
    assert runs[0]["loss"] < runs[0]["initial_loss"] / 2


def _peer(daemon: DaemonProcess) -> str:
    return daemon.status(timeout=5)["peer_id"]
