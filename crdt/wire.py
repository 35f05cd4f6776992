"""Canonical wire forms for CRDT state: strict readers and value codecs.

CRDT state is hashed (replica digests) and signed (deltas), so its encoding must be canonical:
one state, one byte string. The rules: maps travel as arrays of pairs sorted by key and never as
msgpack maps; sets as sorted arrays; no duplicates anywhere; integers in minimal width (msgpack
does that). Readers accept only canonical input, so `decode(encode(x)) == x` and
`encode(decode(b)) == b` for every accepted `b`; each raises `DecodeError` on the first problem.

Values inside registers, maps and sets are encoded by a `Codec`, a pair of functions between
our values and msgpack primitives with strict validation on the way in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack

T = TypeVar("T")
Wire = Any  # None | bool | int | float | str | bytes | list[Wire]

MAX_SEQ = 2**62  # sequence numbers and counters stay well inside msgpack's int64


def read_int(x: object, what: str, *, lo: int = 0, hi: int = MAX_SEQ) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise DecodeError(f"{what} must be an int in [{lo}, {hi}], got {_show(x)}")
    return x


def read_float(x: object, what: str, *, lo: float = 0.0, hi: float = 1e18) -> float:
    if type(x) is not float or math.isnan(x) or not lo <= x <= hi:
        raise DecodeError(f"{what} must be a float in [{lo}, {hi}], got {_show(x)}")
    return x


def read_str(x: object, what: str, *, max_len: int) -> str:
    if type(x) is not str or len(x) > max_len:
        raise DecodeError(f"{what} must be a string of at most {max_len} characters")
    return x


def read_bytes(x: object, what: str, *, max_len: int, exact: bool = False) -> bytes:
    if type(x) is not bytes or len(x) > max_len or (exact and len(x) != max_len):
        size = f"exactly {max_len}" if exact else f"at most {max_len}"
        raise DecodeError(f"{what} must be {size} bytes")
    return x


def read_list(x: object, what: str, *, max_len: int, length: int | None = None) -> list[Any]:
    if type(x) is not list or len(x) > max_len or (length is not None and len(x) != length):
        want = f"{length} items" if length is not None else f"at most {max_len} items"
        raise DecodeError(f"{what} must be an array of {want}")
    return x


def check_ascending(keys: list[Any], what: str) -> None:
    """Canonical order: strictly ascending, so no key appears twice."""
    for a, b in zip(keys, keys[1:], strict=False):
        if not a < b:
            raise DecodeError(f"{what} is not in strictly ascending order (or repeats a key)")


def _show(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """Encode a value to msgpack primitives and read it back strictly (raising DecodeError)."""

    encode: Callable[[T], Wire]
    decode: Callable[[Wire], T]

    def sort_key(self, value: T) -> bytes:
        """A total order on values by their canonical bytes (for ties and map order)."""
        return pack(self.encode(value))


def _identity(x: Any) -> Any:
    return x


def int_codec(*, lo: int = -(2**63), hi: int = 2**63 - 1) -> Codec[int]:
    return Codec(_identity, lambda x: read_int(x, "int value", lo=lo, hi=hi))


def str_codec(*, max_len: int = 256) -> Codec[str]:
    return Codec(_identity, lambda x: read_str(x, "string value", max_len=max_len))


def bytes_codec(*, max_len: int = 256) -> Codec[bytes]:
    return Codec(_identity, lambda x: read_bytes(x, "bytes value", max_len=max_len))


def optional(inner: Codec[T]) -> Codec[T | None]:
    """`None` on the wire means "absent" (an LWW map's tombstone); `inner` must never emit nil."""

    def decode(x: Wire) -> T | None:
        return None if x is None else inner.decode(x)

    def encode(value: T | None) -> Wire:
        return None if value is None else inner.encode(value)

    return Codec(encode, decode)
