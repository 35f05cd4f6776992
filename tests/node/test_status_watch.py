"""`peertrain status --watch` redraws until Ctrl-C; failing services and runs say why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import trio
from peertrain.node.cli.status_text import render_status
from peertrain.testing import open_test_swarm


async def test_status_watch_redraws_until_interrupted_and_exits_cleanly():
    async with open_test_swarm(1) as (node,):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
        process = subprocess.Popen(  # noqa: ASYNC220 - a CLI process beside the in-process daemon
            [
                sys.executable,
                "-m",
                "peertrain",
                "status",
                "--watch",
                "0.3",
                "--home",
                str(node.config.home),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            # a suite started in the background (`make test &`) passes SIGINT on ignored, and
            # Python then installs no KeyboardInterrupt handler: the Ctrl-C below must arrive
            preexec_fn=_default_sigint,
        )
        # two frames first (the daemon answers from this trio loop meanwhile): a Ctrl-C while
        # the CLI still imports would test Python's start-up, not the watch
        with trio.fail_after(60):
            head = await trio.to_thread.run_sync(read_frames, process.stdout, 2)
        process.send_signal(signal.SIGINT)
        try:
            out, _ = await trio.to_thread.run_sync(process.communicate, None, 30)
        finally:
            if process.poll() is None:  # it ignored the Ctrl-C: the assertions say so
                process.kill()
                process.wait()
    text = head + out.decode(errors="replace")
    assert process.returncode == 0, text
    assert text.count("Ctrl-C to stop") >= 2  # redrawn, not printed once
    assert node.identity.name in text


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read_frames(stream, count: int) -> str:
    """Lines of `stream` until `count` frames (each ends with its Ctrl-C line) were read."""
    lines: list[str] = []
    while sum("Ctrl-C to stop" in line for line in lines) < count:
        line = stream.readline().decode(errors="replace")
        if not line:
            break  # the process ended: the assertions say how
        lines.append(line)
    return "".join(lines)


def test_a_quarantined_service_and_a_run_error_are_shown():
    status = {
        "name": "n",
        "peer_id": "p",
        "share": "a",
        "uptime_s": 1.0,
        "peers": [],
        "peer_names": {},
        "run": {
            "name": "r",
            "mode": "diloco",
            "run_id": "abcdef" * 8,
            "round": 3,
            "loss": None,
            "members": [],
            "phase": "exchanging",
            "error": "TransferFailed: no holder",
        },
        "services": [
            {"name": "dht", "state": "running", "restarts": 0, "error": None, "error_at": None},
            {
                "name": "gossip",
                "state": "quarantined",
                "restarts": 4,
                "error": "bug",
                "error_at": 1,
            },
        ],
    }
    text = render_status(status)
    assert "error: TransferFailed: no holder" in text
    assert "gossip quarantined (restarts 4): bug" in text and "dht" not in text.split("peers")[0]
