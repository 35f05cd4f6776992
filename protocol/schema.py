"""Field converters built from type annotations: strict checks between msgpack values and ours.

Every message field's annotation is compiled once into a converter with two directions:
`load` takes what msgpack produced from untrusted bytes and either returns the typed value or
raises `Invalid` (the caller turns it into `DecodeError`); `dump` turns our value into msgpack
primitives and raises `Invalid` on our own mistakes (the caller turns that into `TypeError`).

Strict means: an int field takes an int and not a bool or float; bytes take bytes, not str;
float fields refuse NaN and infinities; `tuple[X, ...]` and `list[X]` take msgpack arrays
of X; `dict[str, V]` takes maps (msgpack keys are strings here, see `packing.unpack`);
`X | None` allows nil; an `enum.Enum` field takes one of its values; a nested `@message`
type takes its field map. Bounds come from `Annotated`: `MaxLen(n)` on str, bytes, sequences
and maps, `IntRange(lo, hi)` on ints. Without a `MaxLen`, the message's own size limit bounds
every container, since each element costs at least one byte.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import Invalid

INT64_MIN, UINT64_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True, slots=True)
class MaxLen:
    """`Annotated[bytes, MaxLen(32)]`: at most 32 bytes / characters / elements / entries."""

    n: int


@dataclass(frozen=True, slots=True)
class IntRange:
    """`Annotated[int, IntRange(0, 2**32 - 1)]`: inclusive bounds."""

    lo: int
    hi: int


class Converter:
    def load(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def dump(self, value: Any, path: str) -> Any:
        raise NotImplementedError


def _check_len(value: Any, max_len: int | None, path: str) -> None:
    if max_len is not None and len(value) > max_len:
        raise Invalid(path, f"length {len(value)} exceeds {max_len}")


@dataclass(frozen=True, slots=True)
class Scalar(Converter):
    kind: type[Any]
    max_len: int | None = None
    int_range: IntRange | None = None

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not self.kind:
            raise Invalid(path, f"expected {self.kind.__name__}, got {type(value).__name__}")
        if self.kind is int:
            lo, hi = (
                (self.int_range.lo, self.int_range.hi)
                if self.int_range
                else (INT64_MIN, UINT64_MAX)
            )
            if not lo <= value <= hi:
                raise Invalid(path, f"{value} is outside [{lo}, {hi}]")
        elif self.kind in (str, bytes):
            _check_len(value, self.max_len, path)
        elif self.kind is float and not math.isfinite(value):
            raise Invalid(path, f"{value} is not a finite number")
        return value

    def dump(self, value: Any, path: str) -> Any:
        if self.kind is float and type(value) is int:
            value = float(value)
        elif self.kind is bytes and isinstance(value, bytearray | memoryview):
            value = bytes(value)
        return self.load(value, path)


@dataclass(frozen=True, slots=True)
class Optional(Converter):
    inner: Converter

    def load(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.load(value, path)

    def dump(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.dump(value, path)


@dataclass(frozen=True, slots=True)
class Sequence(Converter):
    item: Converter
    as_tuple: bool
    max_len: int | None

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not list:
            raise Invalid(path, f"expected an array, got {type(value).__name__}")
        _check_len(value, self.max_len, path)
        items = [self.item.load(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if self.as_tuple else items

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, list | tuple):
            raise Invalid(path, f"expected a list or tuple, got {type(value).__name__}")
        _check_len(value, self.max_len, path)
        return [self.item.dump(v, f"{path}[{i}]") for i, v in enumerate(value)]


@dataclass(frozen=True, slots=True)
class Mapping(Converter):
    key: Converter
    value: Converter
    max_len: int | None

    def _convert(self, value: Any, path: str, how: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise Invalid(path, f"expected a map, got {type(value).__name__}")
        _check_len(value, self.max_len, path)
        key_fn, value_fn = getattr(self.key, how), getattr(self.value, how)
        return {key_fn(k, f"{path}<key>"): value_fn(v, f"{path}[{k!r}]") for k, v in value.items()}

    def load(self, value: Any, path: str) -> Any:
        return self._convert(value, path, "load")

    def dump(self, value: Any, path: str) -> Any:
        return self._convert(value, path, "dump")


@dataclass(frozen=True, slots=True)
class EnumValue(Converter):
    enum_cls: type[enum.Enum]

    def load(self, value: Any, path: str) -> Any:
        for member in self.enum_cls:
            if type(member.value) is type(value) and member.value == value:
                return member
        raise Invalid(path, f"{value!r} is not a {self.enum_cls.__name__}")

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.enum_cls):
            raise Invalid(path, f"expected {self.enum_cls.__name__}, got {value!r}")
        return value.value


@dataclass(frozen=True, slots=True)
class Nested(Converter):
    """A nested message type; `load_fields` / `dump_fields` come from the messages module."""

    cls: type
    load_fields: Callable[[type, Any, str], Any]
    dump_fields: Callable[[Any, str], Any]

    def load(self, value: Any, path: str) -> Any:
        return self.load_fields(self.cls, value, path)

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not self.cls:
            raise Invalid(path, f"expected {self.cls.__name__}, got {type(value).__name__}")
        return self.dump_fields(value, path)


def compile_annotation(annotation: Any, *, nested: Callable[[type], Converter | None]) -> Converter:
    """Turn a (resolved) annotation into a converter; unsupported types are our bug."""
    max_len, int_range = None, None
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *extras = typing.get_args(annotation)
        for extra in extras:
            if isinstance(extra, MaxLen):
                max_len = extra.n
            elif isinstance(extra, IntRange):
                int_range = extra
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)

    def sub(a: Any) -> Converter:
        return compile_annotation(a, nested=nested)

    if annotation in (int, float, bool, str, bytes):
        return Scalar(annotation, max_len, int_range)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return Optional(sub(rest[0]))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return Sequence(sub(args[0]), True, max_len)
    if origin is list and len(args) == 1:
        return Sequence(sub(args[0]), False, max_len)
    if origin is dict and len(args) == 2 and args[0] is str:
        return Mapping(sub(args[0]), sub(args[1]), max_len)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return EnumValue(annotation)
    if isinstance(annotation, type) and (converter := nested(annotation)) is not None:
        return converter
    raise TypeError(f"unsupported wire field type {annotation!r}")
