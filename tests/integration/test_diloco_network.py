"""DiLoCo over real in-process nodes: a run created on one node, joined by name on the others."""

from __future__ import annotations

import trio

from peertrain.testing import open_test_swarm, wait_until

SPEC = dict(model="mlp", dataset="digits", inner_steps=10, batch_size=32, lr=3e-3, warmup_steps=5,
            rounds=4, round_timeout=20, codec="int8", min_members=3)


async def test_three_nodes_train_together_and_end_with_one_model():
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes))
        await nodes[0].runs.create(name="digits", mode="diloco", spec=SPEC)
        for node in nodes[1:]:
            await node.runs.join("digits", timeout=20)
        with trio.fail_after(120):
            await wait_until(lambda: all(n.status()["run"]["finished"] for n in nodes), timeout=120)
        runs = [n.status()["run"] for n in nodes]
    assert {r["state_checksum"] for r in runs} == {runs[0]["state_checksum"]}  # one model everywhere
    assert all(r["round"] == 4 and r["rounds_completed"] == 4 for r in runs)
    assert runs[0]["loss"] < 0.6 * runs[0]["initial_loss"]
    assert all(len(r["members"]) == 3 and r["rejected_updates"] == 0 for r in runs)


async def test_joining_an_unknown_run_fails_clearly():
    from peertrain.node.errors import ControlError

    async with open_test_swarm(2) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 1 for n in nodes))
        try:
            await nodes[1].runs.join("nope", timeout=1)
        except ControlError as exc:
            assert "no connected peer knows a run named 'nope'" in str(exc)
        else:
            raise AssertionError("joined a run nobody has")
