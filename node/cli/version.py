"""`peertrain --version`: what a bug report needs, in a few lines and without importing torch.

    peertrain 0.1.0
    commit    4c5f793a1b2c (a checkout; "-dirty" with local changes; "unknown" otherwise)
    python    3.11.9 (CPython, Linux x86_64)
    torch     2.5.1
    trio      0.27.0
    libp2p    0.8.1

Versions come from the installed distributions' metadata, so nothing heavy is imported.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the repository root is the package
DEPENDENCIES = ("torch", "trio", "libp2p")


def version_text() -> str:
    rows = [
        ("commit", git_commit()),
        ("python", f"{platform.python_version()} ({platform.python_implementation()}, "
                   f"{platform.system()} {platform.machine()})"),
        *((name, _distribution_version(name)) for name in DEPENDENCIES),
    ]  # fmt: skip
    head = f"peertrain {_distribution_version('peertrain')}"
    return "\n".join([head, *(f"{k:<9} {v}" for k, v in rows)])


def git_commit(root: Path = PACKAGE_ROOT) -> str:
    """The checkout's commit (12 hex digits, `-dirty` with local changes), or "unknown" when
    peertrain was not run from a git checkout (an installed wheel) or git is missing."""
    if not (root / ".git").exists():
        return "unknown"
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


class VersionAction(argparse.Action):
    """`--version`: print `version_text()` and exit 0 (argparse's own prints one fixed line)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()
