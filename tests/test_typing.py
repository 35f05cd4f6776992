"""mypy keeps the typed core (protocol/, dht/, crdt/) clean, and the protocol's generic decoders
give callers real types.

The configuration lives in pyproject.toml's `[tool.mypy]` (strict), so the check here is the same
`make lint` a person runs: mypy reads the tree through build/typing/peertrain, a link to the
repository root (the root is the package, and dht/ and crdt/ import `peertrain.protocol`). The
first run takes about 30 s; later runs reuse the cache in build/ and take a few seconds.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (pip install -e '.[test]')",
)


def _link_package_root() -> None:
    """build/typing/peertrain -> the repository root, so every module has its `peertrain.` name."""
    link = ROOT / "build" / "typing" / "peertrain"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(Path("..", ".."), target_is_directory=True)


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    _link_package_root()
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_typed_core_passes_mypy_strict() -> None:
    result = _mypy()
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"


# What a caller of the protocol layer sees: decoding a tuple of types gives their union (so
# isinstance narrows to the concrete reply), and check_reply gives the one reply type.
_CALLER = """
from typing import assert_type
from peertrain.protocol.framing import ByteStream, read_message
from peertrain.protocol.messages import ErrorResponse, Ping, Pong, check_reply, decode

async def caller(stream: ByteStream, raw: bytes) -> None:
    assert_type(decode(raw, Pong), Pong)
    assert_type(decode(raw, (Pong, ErrorResponse)), Pong | ErrorResponse)
    reply = await read_message(stream, (Ping, Pong, ErrorResponse))
    assert_type(reply, Ping | Pong | ErrorResponse)
    assert_type(check_reply(Ping(), decode(raw, (Pong, ErrorResponse))), Pong)
"""


def test_decoders_give_callers_the_concrete_types(tmp_path: Path) -> None:
    caller = tmp_path / "caller.py"
    caller.write_text(_CALLER)
    result = _mypy(str(caller))
    assert result.returncode == 0, f"mypy on a caller:\n{result.stdout}{result.stderr}"
