"""Diffusion expert groups end to end through the CLI: daemons as processes create and join a
diffusion run (K = 2 experts and a router; the bigger expert's group gets two members by need),
train a few rounds, and a node outside the run samples a PNG from the experts it fetches; then it
joins a group no trusted signer trains and starts from that group's newest state."""

from __future__ import annotations

import base64
import struct
import time

import numpy as np
import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import cli_json, wait_until_sync
from peertrain.testing.processes import peertrain_cli, run_status

pytestmark = pytest.mark.slow

ROUNDS = 3
# round 0 of each group waits up to start_timeout for a second member: the pair starts
# together (its second member joins last, 11 s after the run was created here), the single
# groups start alone at their timeout, which is most of this test's wall time (90 s: 128 s)
RUN_FLAGS = [
    "--mode", "diffusion", "--experts", "2", "--dataset", "digits", "--model", "dit-tiny",
    "--inner-steps", "8", "--batch-size", "16", "--rounds", str(ROUNDS), "--round-timeout", "30",
    "--min-members", "2", "--set", "start_timeout=40",
]  # fmt: skip


def start_daemons(tmp_path) -> list[DaemonProcess]:
    """Five daemons: four to train, the last one to stay out of the run and sample."""
    creator = DaemonProcess(tmp_path / "n0", node_args(), DAEMON_ENV).start()
    addr = creator.wait_ready()["share"]
    others = [
        DaemonProcess(tmp_path / f"n{i}", node_args(bootstrap=[addr]), DAEMON_ENV).start()
        for i in (1, 2, 3, 4)
    ]
    for daemon in others:
        daemon.wait_ready()
    return [creator, *others]


def start_members(daemons: list[DaemonProcess], name: str) -> None:
    """The run is created on the first daemon and joined by the others one by one, each once the
    last one's group is in the creator's view (joiners choose the group with the most need)."""
    creator = daemons[0]
    cli_json("run", "create", "--home", str(creator.home), "--name", name, *RUN_FLAGS)
    for daemon in daemons:
        if daemon is not creator:
            cli_json("run", "join", "--home", str(daemon.home), "--run", name)
        peer = daemon.status()["peer_id"]
        wait_until_sync(
            lambda p=peer: any(
                p in g["members"] for g in run_status(creator).get("groups", {}).values()
            ),
            timeout=120,
            interval=0.5,
        )


def png_size(png) -> tuple[int, int]:
    data = png if isinstance(png, bytes) else png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def final_grid_drawn(run: dict) -> bool:
    """An expert member's dashboard grid is of its final state; a router draws none."""
    grid = run.get("sample_grid")
    return grid is None if run.get("group") == "router" else bool(grid and grid["round"] == ROUNDS)


def assert_export_refused(member: DaemonProcess, out) -> None:
    """No node holds a diffusion run's whole model: one line that says so and what to do."""
    refused = peertrain_cli(
        "run", "export", "--home", str(member.home), "--run", "dd", "--out", str(out), check=False
    )
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "diffusion run" in refused.stderr and "peertrain sample --run dd" in refused.stderr


def join_late(stranger: DaemonProcess) -> dict:
    """expert-1 has no trusted signer in it (the creator trains expert-0): a late member starts
    from the state its members announce, not from the initial weights. Its run status."""
    cli_json("run", "join", "--home", str(stranger.home), "--run", "dd", "--group", "expert-1")
    wait_until_sync(lambda: run_status(stranger).get("finished"), timeout=120, interval=1)
    return run_status(stranger)


def sample_once_the_members_stopped(members, stranger, tmp_path) -> tuple[dict, float]:
    """The stranger leaves the run and every member stops; it samples again from what it
    fetched for its first sample. Returns the sample's report and the CLI's seconds."""
    cli_json("run", "leave", "--home", str(stranger.home), "--run", "dd")
    stop_all(members)
    started = time.monotonic()
    sampled = cli_json(
        "sample", "--home", str(stranger.home), "--run", "dd", "--n", "4", "--steps", "3",
        "--out", str(tmp_path / "offline.png"),
    )  # fmt: skip
    return sampled, time.monotonic() - started


def assert_every_member_shows_in_the_run_view(view: dict, groups: list[str]) -> None:
    """`run show`: every member's row with its group and where it stands in it, each group
    agreeing on its own model."""
    assert sorted(m["group"] for m in view["members"]) == groups
    assert all(m["round"] == ROUNDS and m["checksum"] for m in view["members"]), view
    assert view["agreement"]["groups"] == 3 and view["agreement"]["holders"] == 4, view


def test_expert_groups_train_apart_and_a_stranger_samples_their_experts(tmp_path):
    started = time.monotonic()
    *daemons, stranger = start_daemons(tmp_path)
    try:
        start_members(daemons, "dd")
        wait_until_sync(
            lambda: all(run_status(d).get("finished") for d in daemons), timeout=400, interval=1
        )
        wait_until_sync(lambda: all(final_grid_drawn(run_status(d)) for d in daemons), timeout=120)
        runs, out = [run_status(d) for d in daemons], tmp_path / "grid.png"
        view = cli_json("run", "show", "dd", "--home", str(daemons[0].home), "--json")
        sampled = cli_json(
            "sample", "--home", str(stranger.home), "--run", "dd", "--n", "16",
            "--steps", "10", "--strategy", "top1", "--out", str(out),
        )  # fmt: skip
        assert stranger.status()["run"] is None  # it sampled without joining
        arrays = tmp_path / "x.npz"  # a member samples too: its own expert from its own store
        from_member = cli_json(
            "sample", "--home", str(daemons[0].home), "--run", "dd", "--n", "8",
            "--steps", "5", "--strategy", "sample1", "--out", str(arrays),
        )  # fmt: skip
        assert_export_refused(daemons[0], tmp_path / "export")
        late = join_late(stranger)
        offline, offline_s = sample_once_the_members_stopped(daemons, stranger, tmp_path)
    finally:
        codes = stop_all([*daemons, stranger])
    assert all(code == 0 for code in codes)
    groups = sorted(r["group"] for r in runs)
    assert groups == ["expert-0", "expert-0", "expert-1", "router"]  # the pair went by need
    for run in runs:
        assert run["round"] == ROUNDS
        # every update a member aggregated came from its own group: none crossed groups
        assert set(run["traffic"]["updates_from"]) == {run["group"]}
        pair = groups.count(run["group"]) == 2
        assert (run["traffic"]["bytes_fetched"] > 0) == pair
        counted = run["traffic"]["updates_from"][run["group"]]
        # a single member counts its own update each round; the pair both, at least once
        assert counted > ROUNDS if pair else counted == ROUNDS
        if run["group"] != "router":  # its dashboard's grid: 16 of its expert's 8×8 digits
            grid = base64.b64decode(run["sample_grid"]["png"])
            assert png_size(grid) == (4 * 9 + 1, 4 * 9 + 1) and len(grid) < 16 << 10
            assert run["sample_grid"]["caption"].startswith(f"{run['group']} alone")
    assert_every_member_shows_in_the_run_view(view, groups)
    router = next(r for r in runs if r["group"] == "router")
    assert router["router_accuracy"] is not None
    columns = 4  # 16 images in a 4×4 grid of 8×8 digits drawn 4× with 1-pixel gaps
    assert png_size(out) == (columns * 33 + 1, columns * 33 + 1)
    assert sampled["bytes_fetched"] > 0 and set(sampled["groups"]) == set(groups)
    with np.load(arrays) as loaded:
        assert loaded["images"].shape == (8, 1, 8, 8) and np.isfinite(loaded["images"]).all()
    assert from_member["bytes_fetched"] < sampled["bytes_fetched"]  # its own group's is local
    expert_1 = next(r for r in runs if r["group"] == "expert-1")
    assert late["group"] == "expert-1" and late["round"] == ROUNDS
    assert late["state_checksum"] == expert_1["state_checksum"]
    # it held every state it sampled from: no 30 s lookup of members that are gone
    assert offline["bytes_fetched"] == 0 and offline_s < 15, offline_s
    print(f"diffusion e2e took {time.monotonic() - started:.0f} s")
