"""mypy keeps the typed core (protocol/) clean, and its generic decoders give callers real types.

The configuration lives in pyproject.toml's `[tool.mypy]` (strict, files = protocol/), so the
check here is the same plain `mypy` a person runs from the repository root. The first run takes
about 15 s; later runs reuse the cache in build/ and take about a second.
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


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_protocol_passes_mypy() -> None:
    result = _mypy()
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"


# What a caller of the protocol layer sees: decoding a tuple of types gives their union (so
# isinstance narrows to the concrete reply), and check_reply gives the one reply type.
_CALLER = """
from typing import assert_type
from protocol.framing import ByteStream, read_message
from protocol.messages import ErrorResponse, Ping, Pong, check_reply, decode

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
