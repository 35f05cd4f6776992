"""msgpack in and out, with every msgpack failure mapped onto `DecodeError`.

Untrusted bytes are unpacked only here, so one place decides which Python errors the
unpacker may raise and turns them into ours. Size limits are checked *before* unpacking:
msgpack's own container limits are then bounded by the (already bounded) input length,
so a tiny message cannot claim a huge array. Never pickle; msgpack ext types are refused
(the timestamp type -1 decodes to `msgpack.Timestamp`, which no validator accepts).
"""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import DecodeError, MessageTooLarge


def pack(obj: Any) -> bytes:
    """Canonical msgpack: bin type for bytes, str for text, minimal integer widths."""
    raw: bytes = msgpack.packb(obj, use_bin_type=True)  # msgpack has no type hints
    return raw


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"msgpack extension type {code} is not allowed")


def unpack(raw: bytes | bytearray | memoryview, *, max_size: int, what: str = "message") -> Any:
    """Unpack one msgpack object of at most `max_size` bytes; raise only ProtocolError."""
    if len(raw) > max_size:
        raise MessageTooLarge(f"{what} is {len(raw)} bytes, limit {max_size}")
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            use_list=True,
            strict_map_key=True,
            ext_hook=_refuse_ext,
            timestamp=0,
        )
    except DecodeError:
        raise
    except (ValueError, TypeError, msgpack.exceptions.UnpackException) as exc:
        # ValueError covers ExtraData, FormatError, StackError and bad UTF-8; TypeError
        # an unhashable map key (a list used as a key).
        raise DecodeError(f"{what} is not valid msgpack ({type(exc).__name__}: {exc})") from None
