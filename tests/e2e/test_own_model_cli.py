"""A model defined outside peertrain (tests/fixtures/own_model.py), trained by import path in a
3-daemon DiLoCo run through the CLI and exported: the export loads in a fresh process with plain
torch and safetensors, and computes what the group's model computes (issue 17)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import peertrain_cli, run_status

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = "own_model:build"
# the daemons import the user's module from its folder; nothing tells them to trust it
ENV = {
    **DAEMON_ENV,
    "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
    "PEERTRAIN_TRUSTED_MODELS": "",
}
RUN_FLAGS = ["--dataset", "digits", "--batch-size", "32", "--lr", "0.003", "--codec", "int8"]
RUN_FLAGS += ["--inner-steps", "15", "--rounds", "3", "--min-members", "3", "--round-timeout", "20"]
RUN_FLAGS += ["--set", "num_shards=3"]

LOAD_EXPORT = """
import json, sys
sys.path.insert(0, sys.argv[1])  # the user's model code, and nothing of peertrain
import torch
from safetensors.torch import load_file
from own_model import build
model = build()
model.load_state_dict(load_file(sys.argv[2]))
logits, _ = model(torch.linspace(0, 1, 5 * 64).reshape(5, 64))
print(json.dumps({"logits": logits.tolist(), "peertrain": "peertrain" in sys.modules}))
"""


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return peertrain_cli(*args, "--home", str(home), env=ENV, timeout=300, check=check)


def start_three(tmp_path: Path) -> list[DaemonProcess]:
    """n0 creates the run with --model; n1 joins it at start with --model; n2 is a plain node
    whose `run join` is refused until its user names the model too."""
    first = DaemonProcess(tmp_path / "n0", node_args(), ENV).start()
    addr = first.wait_ready()["share"]
    cli(first.home, "run", "create", "--name", "own", "--model", MODEL, *RUN_FLAGS)
    join = ["join", addr, "--run", "own", "--model", MODEL, "--listen", "/ip4/127.0.0.1/tcp/0"]
    second = DaemonProcess(tmp_path / "n1", join, ENV).start()
    third = DaemonProcess(tmp_path / "n2", node_args(bootstrap=[addr]), ENV).start()
    second.wait_ready()
    third.wait_ready()
    refused = cli(third.home, "run", "join", "--run", "own", check=False)
    assert refused.returncode != 0
    assert f"--model {MODEL}" in refused.stderr  # says how to trust it
    cli(third.home, "run", "join", "--run", "own", "--model", MODEL)
    return [first, second, third]


def group_logits(home: Path, run_id: str, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The group's agreed model (the member's newest checkpoint), built from the user's code."""
    info, state = CheckpointStore(home / "runs" / run_id / "checkpoints").latest()
    spec = importlib.util.spec_from_file_location("own_model_here", FIXTURES / "own_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build()
    model.load_state_dict(dict(state.params))
    with torch.no_grad():
        return state.round, model(x)[0]


def test_an_own_model_trains_by_import_path_and_exports_for_plain_torch(tmp_path):
    daemons = start_three(tmp_path)
    try:
        wait_until_sync(
            lambda: all(run_status(d).get("finished") for d in daemons), timeout=240, interval=1
        )
        runs = [run_status(d) for d in daemons]
        exports = [tmp_path / "export0", tmp_path / "export1"]
        for daemon, out in zip(daemons, exports, strict=False):
            cli(daemon.home, "run", "export", "--run", "own", "--out", str(out))
    finally:
        stop_all(daemons)
    assert len({r["state_checksum"] for r in runs}) == 1 and runs[0]["round"] == 3
    assert runs[0]["loss"] < runs[0]["initial_loss"]
    sidecars = [json.loads((out / "export.json").read_text()) for out in exports]
    assert sidecars[0]["files"] == sidecars[1]["files"]  # byte-identical on two members
    assert sidecars[0]["round"] == 3 and sidecars[0]["model"] == MODEL

    weights = exports[0] / "model.safetensors"
    loaded = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_EXPORT, str(FIXTURES), str(weights)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    fresh = json.loads(loaded.stdout)
    assert fresh["peertrain"] is False
    x = torch.linspace(0, 1, 5 * 64).reshape(5, 64)  # the inputs LOAD_EXPORT uses
    round_, expected = group_logits(daemons[0].home, runs[0]["run_id"], x)
    assert round_ == 3
    assert torch.equal(torch.tensor(fresh["logits"]), expected)


def test_a_local_swarm_of_your_own_model_gives_every_member_the_import_path(tmp_path):
    """`swarm local --model mymod:build` (the manual's command): the joiners were started
    without `--model`, refused the run, stayed up as plain nodes while the creator trained alone,
    and the summary said "models identical on all nodes: yes" of that one model."""
    report = tmp_path / "report.json"
    command = "swarm local --nodes 2 --mode diloco --rounds 3 --dataset digits --report".split()
    done = subprocess.run(
        [sys.executable, "-m", "peertrain", *command, str(report), "--model", MODEL],
        cwd=FIXTURES,  # where the user's module is, as for any import path
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    found = json.loads(report.read_text())
    assert found["rounds_completed"] == 3 and found["bytes_sent"] > 0
    assert len(found["state_hashes"]) == 2 and len(set(found["state_hashes"])) == 1
    assert "models identical on all nodes: yes" in done.stdout
