"""The CLI explains itself (issue 32, items 6 and 10): `--version` for a bug report, `--help`
naming every option's environment variable and the built-in models and datasets, `peertrain
logs` on the daemon's own log file, and `--name`, a node's validated public name in `status`.
Real processes: daemons started as a user starts them, the CLI as a user types it."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from peertrain import __version__
from peertrain.node.cli.version import PACKAGE_ROOT, git_commit
from peertrain.testing.processes import peertrain_cli

pytestmark = pytest.mark.slow  # daemons start (~5 s each), then CLI processes


def test_version_names_the_commit_python_torch_trio_and_libp2p():
    lines = peertrain_cli("--version").stdout.splitlines()
    rows = dict(line.split(None, 1) for line in lines[1:])
    assert lines[0] == f"peertrain {__version__}"
    assert rows["python"].startswith(platform.python_version())
    assert rows["torch"] == metadata.version("torch")
    assert rows["trio"] == metadata.version("trio")
    assert rows["libp2p"] == metadata.version("libp2p")
    if (PACKAGE_ROOT / ".git").exists():  # a checkout: the commit it is at
        head = subprocess.run(
            ["git", "-C", str(PACKAGE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert rows["commit"].removesuffix("-dirty") == head[:12]
    assert git_commit(Path("/")) == "unknown"  # not a checkout (an installed wheel)


HELPS = [
    ("node", "start"),
    ("join",),
    ("status",),
    ("run", "create"),
    ("run", "join"),
    ("run", "options"),
    ("swarm", "local"),
    ("logs",),
]


def test_help_names_the_env_var_of_every_option_and_the_built_in_choices():
    from peertrain.node.cli.main import build_parser

    parser = build_parser()
    for command in HELPS:
        text = " ".join(peertrain_cli(*command, "--help").stdout.split())
        sub = parser
        for word in command:
            sub = next(a for a in sub._actions if a.dest == "==SUPPRESS==" and a.choices).choices[
                word
            ]
        for action in sub._actions:
            if action.option_strings and action.help != "==SUPPRESS==" and not action.required:
                if action.dest in ("help",) or _node_key_elsewhere(action.dest, command):
                    continue
                env = f"PEERTRAIN_{action.dest.upper()}"
                assert env in text, (command, action.option_strings)
    create = " ".join(peertrain_cli("run", "create", "--help").stdout.split())
    assert (
        "model to train: gpt, gpt-25m, mlp (diloco, swarm); dit-tiny, dit-small (diffusion)"
        in create
    )
    assert "dataset: text, tokens, images, digits (diloco, swarm); digits, fashion-mnist" in create


def _node_key_elsewhere(dest: str, command: tuple[str, ...]) -> bool:
    """A node-config key (max_params, log_format) sets a daemon's option: its env var is read
    by node start and join only (load_config), not by run create or swarm local."""
    from peertrain.node.config import field_names

    return dest in field_names() and command not in (("node", "start"), ("join",))


def test_the_names_help_lists_are_the_built_in_ones():
    from peertrain.node.cli import options
    from peertrain.swarm.data import DATASET_CONFIGS
    from peertrain.swarm.diffusion.presets import PRESETS
    from peertrain.swarm.diffusion.run_spec import IMAGE_SIZES
    from peertrain.swarm.models import MODEL_CONFIGS

    assert options.MODEL_CHOICES == tuple(MODEL_CONFIGS)
    assert options.DATASET_CHOICES == tuple(n for n in DATASET_CONFIGS if n != "external")
    assert options.DIFFUSION_MODEL_CHOICES == tuple(PRESETS)
    assert options.DIFFUSION_DATASET_CHOICES == tuple(IMAGE_SIZES)


def _start_detached(home: Path, *extra: str) -> subprocess.Popen:
    """`peertrain node start` as in the background: its output thrown away, as `nohup … >
    /dev/null` or systemd would."""
    return subprocess.Popen(
        [sys.executable, "-m", "peertrain", "node", "start", "--home", str(home)]
        + ["--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "plain", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_status(home: Path, daemon: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and daemon.poll() is None:
        result = peertrain_cli("status", "--json", "--home", str(home), check=False)
        if result.returncode == 0:
            return json.loads(result.stdout)
        time.sleep(0.3)
    raise AssertionError(f"daemon in {home} did not answer (exit {daemon.poll()})")


def test_logs_prints_and_follows_the_log_of_a_daemon_whose_output_went_nowhere(tmp_path):
    home = tmp_path / "node"
    missing = peertrain_cli("logs", "--home", str(tmp_path / "none"), check=False)
    assert missing.returncode == 1 and "no log in" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    daemon = _start_detached(home)
    follower = None
    try:
        status = _wait_status(home, daemon)
        logs = peertrain_cli("logs", "--home", str(home)).stdout
        assert f"serving as {status['peer_id']}" in logs
        assert peertrain_cli("logs", "--home", str(home), "--lines", "1").stdout.count("\n") == 1
        follower = subprocess.Popen(
            [sys.executable, "-m", "peertrain", "logs", "--follow", "--home", str(home)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)  # the follower reads to the end and waits for more
        peertrain_cli("node", "stop", "--home", str(home))
        time.sleep(1)
        follower.terminate()
        followed = follower.communicate(timeout=10)[0]
        assert "serving as" in followed and "received SIGTERM, stopping" in followed
    finally:
        for process in (daemon, follower):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("x" * 33, "is 33 characters long"),
        ("evil\x1b[2Jname", r"holds the control character '\x1b' at 4"),
        ("two\nlines", r"holds the control character '\n' at 3"),
    ],
)
def test_a_bad_public_name_is_refused_in_one_line(tmp_path, name, says):
    result = peertrain_cli("node", "start", "--home", str(tmp_path), "--name", name, check=False)
    message = result.stderr.strip()
    assert result.returncode == 1 and says in message and "--name" in message
    assert "\n" not in message and "Traceback" not in message


def test_the_public_name_is_shown_in_status_and_its_json(tmp_path):
    home = tmp_path / "node"
    daemon = _start_detached(home, "--name", "alice's GPU ü")
    try:
        status = _wait_status(home, daemon)
        assert status["public_name"] == "alice's GPU ü"
        text = peertrain_cli("status", "--home", str(home)).stdout
        assert text.splitlines()[1] == "  public name  alice's GPU ü"
        peertrain_cli("node", "stop", "--home", str(home))
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
