"""A remote manifest never names the joiner's files nor decides how much memory it spends
(issue 14, item 5): refused at join, before a session builds anything.

The squatter is a real daemon answering run lookups with a manifest it signed itself (what any
peer can do); the victim is a real daemon joining it by run ID.
"""

from __future__ import annotations

import resource

import pytest
from peertrain.crdt.manifest import RunManifest, sign_manifest
from peertrain.node.errors import ControlError
from peertrain.node.net.rpc import RpcServer
from peertrain.node.runs.manager import RUN_LOOKUP, RunFound, RunLookup
from peertrain.protocol.packing import pack
from peertrain.swarm.budget import RunBudget
from peertrain.swarm.data import file_digest
from peertrain.swarm.run_spec import canonical
from peertrain.testing import open_test_swarm

SMALL_TEXT = {"chunk_bytes": 256, "block_size": 16, "eval_chunks": 8, "max_bytes": 60_000}
SMALL_GPT = {"n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 16}


def squat(squatter, spec: dict) -> str:
    """Make `squatter` serve a run whose spec bytes it wrote by hand (no local validation
    stands between an attacker and the bytes it signs); returns the run ID."""
    manifest = RunManifest(
        creator=squatter.services.peer_id,
        created_ms=1,
        name="free-gpus",
        mode="diloco",
        spec=pack(canonical(spec)),
    )
    envelope = sign_manifest(squatter.services.identity.key_pair, manifest)

    async def answer(peer, req: RunLookup):
        return req.reply(RunFound, run_id=manifest.run_id, manifest=envelope)

    host, board = squatter.services.host, squatter.services.scoreboard
    RpcServer(host, RUN_LOOKUP, RunLookup, answer, scoreboard=board).register()
    return manifest.run_id


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


async def test_a_spec_naming_local_files_is_refused_on_join(tmp_path):
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n" * 400)
    spec = {"dataset": "text", "dataset_settings": {"sources": [], "files": [str(secret)]}}
    async with open_test_swarm(2) as (squatter, victim):
        run_id = squat(squatter, spec)
        with pytest.raises(ControlError, match="may not name local files"):
            await victim.runs.join(run_id, timeout=10)
        assert victim.runs.sessions == {}
        assert not (victim.config.home / "runs" / run_id).exists()


async def test_an_oversized_model_is_refused_before_anything_is_built():
    # ≈ 50 M parameters (200 MB of fp32 weights alone) against a 10 M budget
    big = {"n_layer": 4, "n_embd": 1024, "n_head": 16, "block_size": 64}
    spec = {"model": "gpt", "model_settings": big, "dataset": "text"}
    async with open_test_swarm(2) as (squatter, victim):
        victim.runs.budget = RunBudget(max_params=10_000_000)
        run_id = squat(squatter, spec)
        before = max_rss_bytes()
        with pytest.raises(ControlError, match=r"50,\d{3},\d{3} parameters.*10,000,000"):
            await victim.runs.join(run_id, timeout=10)
        assert victim.runs.sessions == {}
        assert max_rss_bytes() - before < 100 << 20  # building it would take > 200 MB


async def test_a_dataset_over_the_memory_budget_is_refused():
    spec = {"dataset": "text", "dataset_settings": {"max_bytes": 1 << 40}}
    async with open_test_swarm(2) as (squatter, victim):
        run_id = squat(squatter, spec)
        with pytest.raises(ControlError, match="--max-memory"):
            await victim.runs.join(run_id, timeout=10)
        assert victim.runs.sessions == {}


async def test_user_data_is_named_by_digest_and_a_member_with_other_data_is_refused(tmp_path):
    ours, theirs = tmp_path / "ours.txt", tmp_path / "theirs.txt"
    ours.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 500)
    theirs.write_bytes(b"pack my box with five dozen liquor jugs. " * 500)
    spec = {
        "model": "gpt",
        "model_settings": SMALL_GPT,
        "dataset_settings": SMALL_TEXT,
        "inner_steps": 2,
        "rounds": 1,
        "batch_size": 4,
    }
    async with open_test_swarm(2) as (creator, member):
        session = await creator.runs.create(name="mine", mode="diloco", spec=spec, data=str(ours))
        assert session.status()["error"] is None
        settings = dataset_settings_of(session.manifest)
        assert settings["data_digest"] == file_digest(ours)
        assert str(tmp_path) not in repr(session.manifest.spec)  # no path leaves this node

        with pytest.raises(ControlError) as refused:
            await member.runs.join(session.run_id[:12], timeout=10, data=str(theirs))
        assert file_digest(ours) in str(refused.value)
        assert file_digest(theirs) in str(refused.value)
        with pytest.raises(ControlError, match=f"digest {file_digest(ours)}.*--data"):
            await member.runs.join(session.run_id[:12], timeout=10)
        assert member.runs.sessions == {}

        joined = await member.runs.join(session.run_id[:12], timeout=10, data=str(ours))
        assert joined.run_id == session.run_id


def dataset_settings_of(manifest: RunManifest) -> dict:
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

    return dict(DiLoCoSpec.from_bytes(manifest.spec).dataset_settings)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("model", 5, "setting 'model' must be a string, got int 5"),
        ("inner_steps", "many", "setting 'inner_steps' must be an integer, got str 'many'"),
        ("lr", float("nan"), "setting 'lr' must be a finite number, got nan"),
        ("round_timeout", float("inf"), "setting 'round_timeout' must be a finite number"),
        ("start_timeout", float("nan"), "setting 'start_timeout' must be a finite number"),
        ("anchors", "12D3KooW", "setting 'anchors' must be a list"),
        ("model_settings", [1, 2], "setting 'model_settings' must be a map"),
        ("rounds", True, "setting 'rounds' must be an integer, got bool True"),
    ],
)
def test_a_remote_spec_of_the_wrong_type_or_not_finite_is_refused_in_one_line_naming_the_field(
    field, value, says
):
    """A stranger's spec is bytes it wrote by hand: `model: 5` answered "internal error", and a
    NaN learning rate or an infinite round timeout passed every check."""
    from peertrain.node.runs.spec_check import decode_spec

    manifest = RunManifest(
        creator="x", created_ms=1, name="odd", mode="diloco", spec=pack(canonical({field: value}))
    )
    with pytest.raises(ControlError, match="refusing run 'odd': invalid DiLoCo spec") as refused:
        decode_spec(manifest)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_misspelt_setting_names_the_nearest_one_and_the_list():
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"unknown setting 'inner_step' \(did you mean 'inner_steps'\?\); valid settings "
        r"are: accumulation, ",
    ):
        DiLoCoSpec.checked({"inner_step": 5})


@pytest.mark.parametrize(
    ("model", "settings", "batch"),
    [
        ("mlp", {}, 20_000_000),  # estimated 4.3 MiB before: the first inner step failed
        ("gpt", SMALL_GPT, 2_000_000),
    ],
)
def test_a_batch_whose_activations_pass_the_memory_budget_is_refused_before_building(
    model, settings, batch
):
    from peertrain.node.runs.spec_check import check_spec

    spec = {"model": model, "model_settings": settings, "batch_size": batch}
    if model == "gpt":
        spec.update(dataset="text", dataset_settings=SMALL_TEXT)
    else:
        spec.update(dataset="digits")
    manifest = RunManifest(
        creator="x", created_ms=1, name="big-batch", mode="diloco", spec=pack(canonical(spec))
    )
    budget = RunBudget(max_memory=1 << 30)
    with pytest.raises(ControlError, match="activations\\), over this node's limit of 1,024 MiB"):
        check_spec(manifest, budget=budget, data=None)
    spec["batch_size"] = 16  # the same run at an ordinary batch fits
    small = RunManifest(
        creator="x", created_ms=1, name="ok", mode="diloco", spec=pack(canonical(spec))
    )
    check_spec(small, budget=budget, data=None)
