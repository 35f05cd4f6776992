"""Kill points: SIGKILL a process at every step of a durable write, then check what a restart loads.

A durable write is a sequence of system steps: open a file for writing, write (whole, or torn
half way), fsync, rename, fsync a directory, unlink. The harness runs a site's writer in a child
process with those steps counted, then once per step with the process SIGKILLed right at that
step (after half the bytes, for a torn write), and each time reads the result back in a fresh
process: the reader must load intact data, the value from before the write or the one after,
never a torn one and never an error that would keep a restarted daemon from its run.

    points = count_points("certificate", tmp_path)          # the steps of one write
    for point in range(points):
        outcome = kill_at("certificate", tmp_path / str(point), point)
        assert outcome.killed and outcome.loaded in outcome.allowed

Sites are real product writers (`SITES`), each with a setup (the value before), the write (the
value after) and a reader; nothing here writes files itself. Like SQLite's crash tests, it is
the system calls that are interrupted, not the product's own functions, so a writer that
skips a step has one point fewer, and one that writes in place shows a torn file.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# -- the sites: (setup, write, read) on a directory, each run in a child process ---------------


def _certificate() -> tuple[Callable, Callable, Callable]:
    from peertrain.node.runs.certificate_file import load_certificate, save_certificate

    return (
        lambda d: save_certificate(d, b"old certificate " * 64),
        lambda d: save_certificate(d, b"new certificate " * 64),
        lambda d: load_certificate(d).decode(),
    )


def _local_data() -> tuple[Callable, Callable, Callable]:
    from peertrain.node.runs.spec_check import local_data, remember_data

    return (
        lambda d: remember_data(d, "/data/old/train.bin"),
        lambda d: remember_data(d, "/data/new/train.bin"),
        local_data,
    )


def _manifest() -> tuple[Callable, Callable, Callable]:
    from peertrain.node.runs.session import save_manifest

    def read(d: Path) -> str:
        path = d / "manifest.envelope"
        return path.read_bytes().decode() if path.exists() else ""

    return (lambda d: None, lambda d: save_manifest(d, b"signed manifest " * 256), read)


def _identity() -> tuple[Callable, Callable, Callable]:
    from peertrain.node.net.identity import load_or_create_identity

    def read(d: Path) -> str:
        load_or_create_identity(d)  # raises on a torn key: the daemon would not start
        return "a valid identity"

    return (lambda d: None, load_or_create_identity, read)


def _checkpoint() -> tuple[Callable, Callable, Callable]:
    import torch
    from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
    from peertrain.swarm.diloco.member.member import MemberState

    def state(round_: int) -> MemberState:
        params = {"w": torch.full((4096,), float(round_))}
        return MemberState(round=round_, params=params, momentum=torch.zeros(4096))

    def read(d: Path) -> str:
        found = CheckpointStore(d, keep=1).latest()  # raises on a torn checkpoint
        return "none" if found is None else f"round {found[1].round}"

    return (
        lambda d: CheckpointStore(d, keep=1).save(state(1)),
        lambda d: CheckpointStore(d, keep=1).save(state(2)),  # and prunes round 1
        read,
    )


SITES: dict[str, Callable[[], tuple[Callable, Callable, Callable]]] = {
    "certificate": _certificate,
    "local-data": _local_data,
    "manifest": _manifest,
    "identity": _identity,
    "checkpoint": _checkpoint,
}

# what a reader may see after a kill at any point: the value before the write or after it
ALLOWED: dict[str, tuple[str, ...]] = {
    "certificate": ("old certificate " * 64, "new certificate " * 64),
    "local-data": ("/data/old/train.bin", "/data/new/train.bin"),
    "manifest": ("", "signed manifest " * 256),
    "identity": ("a valid identity",),
    "checkpoint": ("round 1", "round 2"),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    killed: bool  # the writer died by SIGKILL at the point (False: it finished first)
    loaded: str  # what the reader loaded, or "error: …"
    allowed: tuple[str, ...]


def count_points(site: str, directory: Path) -> int:
    """The steps one write of `site` takes (a child process runs it to the end)."""
    directory.mkdir(parents=True, exist_ok=True)
    done = _child("count", site, directory, -1)
    return int(json.loads(done.stdout.strip().splitlines()[-1])["points"])


def kill_at(site: str, directory: Path, point: int, torn: float = 0.5) -> Outcome:
    """Write `site` in a child killed at step `point`, then read it back in a fresh child.
    `torn`: the fraction of a write's bytes that reach the file when the point is a write (the
    soak's `--kill-points` varies it: another instant inside the same write)."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = _child("kill", site, directory, point, torn)
    reader = _child("read", site, directory, -1)
    lines = reader.stdout.strip().splitlines()
    loaded = (
        json.loads(lines[-1])["loaded"]
        if reader.returncode == 0 and lines
        else ("error: " + (reader.stderr.strip().splitlines() or ["(nothing)"])[-1])
    )
    return Outcome(
        killed=writer.returncode == -signal.SIGKILL, loaded=loaded, allowed=ALLOWED[site]
    )


def _child(
    mode: str, site: str, directory: Path, point: int, torn: float = 0.5
) -> subprocess.CompletedProcess:
    code = "from peertrain.testing.kill_points import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, mode, site, str(directory), str(point), str(torn)],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- in the child -------------------------------------------------------------------------------


class _Steps:
    """Counts the system steps of a write; SIGKILLs this process at step `kill`."""

    def __init__(self, kill: int, torn: float = 0.5) -> None:
        self.kill, self.count, self.torn = kill, 0, torn

    def part(self, data: Any) -> Any:
        """The bytes of `data` a write torn at this kill point leaves behind."""
        return data[: int(len(data) * self.torn)]

    def step(self, torn: Callable[[], Any] | None = None) -> None:
        if self.count == self.kill:
            if torn is not None:
                torn()  # half the bytes reach the file first
            os.kill(os.getpid(), signal.SIGKILL)
        self.count += 1


class _File:
    """A file opened for writing whose writes are steps (one to tear, one to finish)."""

    def __init__(self, raw: Any, steps: _Steps) -> None:
        self._raw, self._steps = raw, steps

    def write(self, data: Any) -> int:
        half = self._steps.part(data)

        def tear() -> None:
            self._raw.write(half)
            self._raw.flush()

        self._steps.step(tear)
        return self._raw.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()


def _instrument(steps: _Steps) -> None:
    real_open, real_write = io.open, os.write

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raw = real_open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+"):
            steps.step()  # the file exists (empty) from here
            return _File(raw, steps)
        return raw

    def write(fd: int, data: Any) -> int:
        steps.step(lambda: real_write(fd, bytes(steps.part(data))))
        return real_write(fd, data)

    def wrap(name: str) -> None:
        real = getattr(os, name)

        def stepped(*args: Any, **kwargs: Any) -> Any:
            steps.step()
            return real(*args, **kwargs)

        setattr(os, name, stepped)

    io.open = builtins.open = open_  # type: ignore[assignment]
    os.write = write  # type: ignore[assignment]
    for name in ("fsync", "replace", "rename", "unlink"):
        wrap(name)


def main() -> None:
    mode, site, directory, point = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    setup, write, read = SITES[site]()
    if mode == "read":
        print(json.dumps({"loaded": read(directory)}))
        return
    setup(directory)
    torn = float(sys.argv[5]) if len(sys.argv) > 5 else 0.5
    steps = _Steps(point if mode == "kill" else -1, torn)
    _instrument(steps)
    write(directory)
    print(json.dumps({"points": steps.count}))
