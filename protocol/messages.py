"""Wire messages: frozen, keyword-only dataclasses with a strict msgpack codec.

Declaring a message type is one decorator; the class becomes a frozen, kw-only, slotted
dataclass, is registered under its tag, and gets a hard size limit:

    @message("crdt/delta", max_size=64 * 1024)
    class Delta(Message):
        slot: Annotated[str, MaxLen(64)]
        entries: tuple[bytes, ...]

The wire form is `[tag, {field: value}]`. Fields are named, so a newer minor version may add
fields with defaults: older peers ignore keys they do not know, and a missing field takes its
default. `decode(raw, Delta)` checks the size *before* unpacking, then the tag, then every
field's type (`schema.py`), then runs the class's `__post_init__` (which may raise ValueError
for semantic checks); every failure comes out as `DecodeError` or `MessageTooLarge`.

Request/response pairs derive from `Request` and `Response`: a request gets a random 64-bit
`request_id` unless given one, `request.reply(Pong, ...)` echoes it, and `check_reply` refuses a
response to some other request and turns an `ErrorResponse` into `RemoteError`.
Tensors never travel in messages (see `tensors.py`); this codec is for control messages.
"""

from __future__ import annotations

import dataclasses
import secrets
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar, dataclass_transform, overload

from .errors import DecodeError, Invalid, MessageTooLarge, RemoteError
from .packing import pack, unpack
from .schema import Converter, IntRange, MaxLen, Nested, compile_annotation

M = TypeVar("M", bound="Message")
M2 = TypeVar("M2", bound="Message")
M3 = TypeVar("M3", bound="Message")
M4 = TypeVar("M4", bound="Message")
R = TypeVar("R", bound="Response")
_REGISTRY: dict[str, type[Message]] = {}
_FIELDS: dict[type, list[tuple[str, Converter, bool]]] = {}  # bounded: one entry per class
MAX_TAG_LEN = 64


class Message:
    """Base class of every wire message; subclasses are declared with `@message`."""

    __slots__ = ()
    wire_tag: ClassVar[str]
    wire_max_size: ClassVar[int]
    if TYPE_CHECKING:  # every subclass is made a dataclass by `@message`
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


@dataclass_transform(
    frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field,)
)
def message(tag: str, *, max_size: int) -> Callable[[type[M]], type[M]]:
    """Make `cls` a registered wire message under `tag`, at most `max_size` encoded bytes."""
    if not 0 < len(tag) <= MAX_TAG_LEN:
        raise ValueError(f"message tag must be 1..{MAX_TAG_LEN} characters")
    if max_size < 16:
        raise ValueError("max_size must leave room for the tag and fields")

    def register(cls: type[M]) -> type[M]:
        if not issubclass(cls, Message):
            raise TypeError(f"{cls.__name__} must derive from Message")
        if tag in _REGISTRY:
            raise ValueError(f"message tag {tag!r} is already used by {_REGISTRY[tag].__name__}")
        new = dataclasses.dataclass(frozen=True, kw_only=True, slots=True)(cls)
        new.wire_tag = tag
        new.wire_max_size = max_size
        _REGISTRY[tag] = new
        return new

    return register


def registered_messages() -> dict[str, type[Message]]:
    """Every message type declared so far, by tag (for conformance tests and docs)."""
    return dict(_REGISTRY)


def _nested(cls: type) -> Converter | None:
    if issubclass(cls, Message) and dataclasses.is_dataclass(cls):
        return Nested(cls, _load_fields, _dump_fields)
    return None


def _fields(cls: type) -> list[tuple[str, Converter, bool]]:
    """(name, converter, has_default) per field, compiled on first use (forward refs resolved)."""
    compiled = _FIELDS.get(cls)
    if compiled is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        compiled = [
            (
                f.name,
                compile_annotation(hints[f.name], nested=_nested),
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        ]
        _FIELDS[cls] = compiled
    return compiled


def _load_fields(cls: type[M], value: Any, path: str) -> M:
    if type(value) is not dict:
        raise Invalid(path, f"expected a field map, got {type(value).__name__}")
    kwargs = {}
    for name, converter, has_default in _fields(cls):
        if name in value:
            kwargs[name] = converter.load(value[name], f"{path}.{name}")
        elif not has_default:
            raise Invalid(f"{path}.{name}", "missing")
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a __post_init__ semantic check
        raise Invalid(path, str(exc)) from None


def _dump_fields(msg: Message, path: str) -> dict[str, Any]:
    return {
        name: converter.dump(getattr(msg, name), f"{path}.{name}")
        for name, converter, _ in _fields(type(msg))
    }


def encode(msg: Message) -> bytes:
    """Encode one of our messages; a wrongly typed field is our bug (TypeError)."""
    cls = type(msg)
    try:
        raw = pack([cls.wire_tag, _dump_fields(msg, cls.__name__)])
    except Invalid as exc:
        raise TypeError(f"cannot encode {cls.__name__}: {exc}") from None
    if len(raw) > cls.wire_max_size:
        raise MessageTooLarge(
            f"{cls.__name__} encodes to {len(raw)} bytes, limit {cls.wire_max_size}"
        )
    return raw


_Raw = bytes | bytearray | memoryview


# The overloads give a caller the union of the types it expects (`(Pong, ErrorResponse)` gives
# `Pong | ErrorResponse`), not their common base class, so narrowing with isinstance works.
@overload
def decode(raw: _Raw, expected: type[M] | tuple[type[M]]) -> M: ...
@overload
def decode(raw: _Raw, expected: tuple[type[M], type[M2]]) -> M | M2: ...
@overload
def decode(raw: _Raw, expected: tuple[type[M], type[M2], type[M3]]) -> M | M2 | M3: ...
@overload
def decode(
    raw: _Raw, expected: tuple[type[M], type[M2], type[M3], type[M4]]
) -> M | M2 | M3 | M4: ...
@overload
def decode(raw: _Raw, expected: tuple[type[M], ...]) -> M: ...
def decode(raw: _Raw, expected: type[Message] | tuple[type[Message], ...]) -> Message:
    """Decode untrusted bytes into one of the `expected` types; raise only ProtocolError."""
    choices = expected if isinstance(expected, tuple) else (expected,)
    by_tag = {cls.wire_tag: cls for cls in choices}
    obj = unpack(raw, max_size=max(cls.wire_max_size for cls in choices), what="message")
    if type(obj) is not list or len(obj) != 2 or type(obj[0]) is not str:
        raise DecodeError("a message is a [tag, fields] array")
    cls = by_tag.get(obj[0])
    if cls is None:
        raise DecodeError(
            f"expected a message tagged {sorted(by_tag)}, got {obj[0][:MAX_TAG_LEN]!r}"
        )
    if len(raw) > cls.wire_max_size:
        raise MessageTooLarge(f"{cls.__name__} is {len(raw)} bytes, limit {cls.wire_max_size}")
    try:
        return _load_fields(cls, obj[1], cls.__name__)
    except Invalid as exc:
        raise DecodeError(f"bad {cls.__name__}: {exc}") from None


RequestId = Annotated[int, IntRange(0, 2**64 - 1)]


def new_request_id() -> int:
    return secrets.randbits(64)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request(Message):
    """A message that expects one `Response` carrying the same `request_id`."""

    request_id: RequestId = dataclasses.field(default_factory=new_request_id)

    def reply(self, response_type: type[R], **fields: Any) -> R:
        return response_type(request_id=self.request_id, **fields)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Response(Message):
    request_id: RequestId


def check_reply(request: Request, response: R | ErrorResponse) -> R:
    """The response if it answers `request`; `DecodeError` if not, `RemoteError` if refused."""
    if response.request_id != request.request_id:
        raise DecodeError(
            f"response echoes request id {response.request_id}, expected {request.request_id}"
        )
    if isinstance(response, ErrorResponse):
        raise RemoteError(code=response.code, reason=response.reason)
    return response


class ErrorCode:
    """Well-known `ErrorResponse.code` values; other layers may define more above 100."""

    BAD_REQUEST = 1
    NOT_FOUND = 2
    BUSY = 3
    FORBIDDEN = 4
    UNSUPPORTED = 5
    INTERNAL = 6


@message("core/ping", max_size=64)
class Ping(Request):
    pass


@message("core/pong", max_size=64)
class Pong(Response):
    pass


@message("core/error", max_size=512)
class ErrorResponse(Response):
    """A refusal: the request was understood and declined (not a protocol violation)."""

    code: Annotated[int, IntRange(0, 65_535)]
    reason: Annotated[str, MaxLen(256)] = ""
