"""Our member certificate of an invite run, kept beside the run's state so a restart rejoins."""

from __future__ import annotations

from pathlib import Path

from peertrain.swarm.checkpoint_files import write_atomic

CERTIFICATE_FILE = "certificate"


def save_certificate(directory: Path, raw: bytes | None) -> None:
    if raw is None:
        return  # a join without --certificate keeps the one given before
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(directory / CERTIFICATE_FILE, raw)  # a torn one kept a restart from its run


def load_certificate(directory: Path) -> bytes:
    path = directory / CERTIFICATE_FILE
    return path.read_bytes() if path.exists() else b""
