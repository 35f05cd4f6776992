"""Stage checkpoints: verified files on disk, and a stage whose servers all restart resumes from
them (its loss stays where training brought it) instead of from its seed."""

from __future__ import annotations

import torch
import trio
from peertrain.swarm.data.text import TextDatasetConfig
from peertrain.swarm.models.gpt import GPTConfig
from peertrain.swarm.pipeline.checkpoint import StageCheckpoint, StageCheckpoints
from peertrain.testing.pipeline_harness import SwarmSpec, evaluate, open_in_process_swarm

GPT = GPTConfig(n_layer=3, n_embd=32, n_head=2, block_size=16)


def _checkpoint(round_: int, *, stage: int = 1) -> StageCheckpoint:
    flat = torch.randn(30, generator=torch.Generator().manual_seed(round_))
    return StageCheckpoint(stage=stage, round=round_, adam_step=round_, flat=flat)


def test_the_newest_checkpoint_that_verifies_is_loaded(tmp_path) -> None:
    store = StageCheckpoints(tmp_path, keep=2, manifest_hash="run-a")
    assert store.latest(1) is None
    for round_ in (3, 6, 9):
        store.save(_checkpoint(round_))
    assert [r for r, _ in store.rounds(1)] == [6, 9]  # keep=2 pruned round 3
    assert len(list((tmp_path / "1").glob("*.safetensors"))) == 2
    latest = store.latest(1)
    assert latest is not None and (latest.round, latest.adam_step) == (9, 9)
    assert torch.equal(latest.flat, _checkpoint(9).flat)
    # flip one byte of the newest tensor file: it fails its digest, round 6 is loaded instead
    newest = store.load(1, store.rounds(1)[-1][1])
    sidecar = (tmp_path / "1" / f"{newest.id}.json").read_text()
    digest = sidecar.split('"tensors_digest":"')[1][:64]
    path = tmp_path / "1" / f"{digest}.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    fallback = store.latest(1)
    assert fallback is not None and fallback.round == 6
    # another run's checkpoints (another manifest) and another stage's are never taken
    assert StageCheckpoints(tmp_path, manifest_hash="run-b").latest(1) is None
    assert store.latest(2) is None


def test_a_forged_sidecar_is_refused(tmp_path) -> None:
    store = StageCheckpoints(tmp_path)
    checkpoint_id = store.save(_checkpoint(4))
    path = tmp_path / "1" / f"{checkpoint_id}.json"
    path.write_text(path.read_text().replace('"round":4', '"round":400'))
    assert store.latest(1) is None  # it no longer hashes to its name


async def _restart_stage(tmp_path, *, checkpoints: bool) -> dict:
    data = TextDatasetConfig(block_size=16).build()
    batches = data.train_batches(0, 1, batch_size=8, seed=0)
    spec = SwarmSpec(
        speeds=((1.0, 1.0),) * 3, model=GPT, batch_size=8, target_batch=16, checkpoint_every=2
    )
    folder = tmp_path if checkpoints else None
    async with open_in_process_swarm(spec, checkpoints=folder) as swarm:
        x, y = data.eval_batches(batch_size=32, max_batches=1)[0]
        initial, _ = evaluate(swarm, x, y)
        trainer = swarm.new_trainer(in_flight=4)
        await trainer.train(batches, steps=40)
        await swarm.settle()
        last = swarm.members(2)
        with trio.fail_after(10):  # the newest rounds' checkpoints are written in the background
            while any(h.service._saving for h in last):  # noqa: ASYNC110 — a status, no event
                await trio.sleep(0.01)
        before, _ = evaluate(swarm, x, y)
        for host in last:  # every server of the last stage (final norm, head, loss) dies
            swarm.kill(host.peer)
        restarted = [await swarm.restart(host.peer) for host in last]
        after, _ = evaluate(swarm, x, y)
        await trainer.train(batches, steps=8, start=40)  # and the stage trains on
        return {
            "initial": initial,
            "before": before,
            "after": after,
            "resumed": [h.service.resumed for h in restarted],
            "lost": trainer.statistics().lost,
        }


async def test_a_stage_whose_servers_all_restart_resumes_from_its_checkpoint(tmp_path) -> None:
    run = await _restart_stage(tmp_path, checkpoints=True)
    first, second = run["resumed"]
    assert first["from"] == "checkpoint" and first["round"] >= 2
    assert second["from"] in ("checkpoint", "peer") and second["round"] == first["round"]
    assert run["before"] < run["initial"] - 1.0
    # its loss stays where training brought it: at most a round or two of progress is lost
    assert run["after"] < run["before"] + 0.25 * (run["initial"] - run["before"]), run
    assert run["lost"] == 0


async def test_without_checkpoints_the_restarted_stage_starts_from_its_seed(tmp_path) -> None:
    run = await _restart_stage(tmp_path, checkpoints=False)
    # the first one back starts from the seed; the second copies it (round 0) from the first
    assert run["resumed"] == [{"from": "seed", "round": 0}, {"from": "peer", "round": 0}]
    assert run["after"] > run["before"] + 0.5 * (run["initial"] - run["before"]), run
