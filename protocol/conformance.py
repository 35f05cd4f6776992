"""Conformance checks every wire message type (and every tensor codec) must pass.

Like trio's `check_two_way_stream`, these live in the package so that other layers run the
same checks on the message types they declare: `check_message_type(MyDelta, example)` in a
test is all it takes. They raise AssertionError with a precise message; they need no pytest.

`check_message_type` proves: the class is a frozen, kw-only, slotted, registered dataclass;
the example round-trips exactly and canonically; it fits the type's size limit; and every
way of breaking it we can derive generically (truncation, padding past the limit, a wrong tag,
each field missing or of the wrong type, random byte mutations) raises a `ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from .errors import DecodeError, MessageTooLarge, ProtocolError
from .messages import Message, decode, encode, registered_messages
from .packing import pack, unpack


def _expect(error: type[Exception], fn: Any, what: str) -> None:
    try:
        fn()
    except error:
        return
    except Exception as exc:  # noqa: BLE001 - the check reports any other outcome
        raise AssertionError(f"{what}: raised {exc!r}, expected {error.__name__}") from exc
    raise AssertionError(f"{what}: decoded, expected {error.__name__}")


def _wrong_value(value: Any) -> Any:
    """A value no converter accepts in place of `value` (a float is only ever a float)."""
    return "not-a-float" if isinstance(value, float) else 0.5


def check_message_type(cls: type[Message], example: Message, *, mutations: int = 200) -> None:
    assert type(example) is cls, f"example is a {type(example).__name__}, not {cls.__name__}"
    assert registered_messages().get(cls.wire_tag) is cls, f"{cls.__name__} is not registered"
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen, f"{cls.__name__} must be frozen"
    assert not hasattr(example, "__dict__"), f"{cls.__name__} must use slots"
    assert all(f.kw_only for f in dataclasses.fields(cls)), f"{cls.__name__} must be kw-only"

    raw = encode(example)
    assert len(raw) <= cls.wire_max_size, f"example is {len(raw)} bytes > {cls.wire_max_size}"
    back = decode(raw, cls)
    assert back == example, f"round trip changed {example!r} into {back!r}"
    assert encode(back) == raw, "encoding is not canonical"

    padded = raw + b"\x00" * (cls.wire_max_size + 1 - len(raw))
    _expect(MessageTooLarge, lambda: decode(padded, cls), "oversized input")
    for cut in range(len(raw)):
        _expect(DecodeError, lambda cut=cut: decode(raw[:cut], cls), f"truncated to {cut} bytes")
    _expect(DecodeError, lambda: decode(raw + b"\xc0", cls), "trailing byte")

    tag, fields = unpack(raw, max_size=cls.wire_max_size)
    _expect(DecodeError, lambda: decode(pack([tag + "?", fields]), cls), "wrong tag")
    _expect(DecodeError, lambda: decode(pack([tag, list(fields.values())]), cls), "fields as array")
    for name, value in fields.items():
        wrong = {**fields, name: _wrong_value(value)}
        _expect(
            DecodeError,
            lambda wrong=wrong: decode(pack([tag, wrong]), cls),
            f"field {name} mistyped",
        )
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            missing = {k: v for k, v in fields.items() if k != name}
            _expect(
                DecodeError,
                lambda missing=missing: decode(pack([tag, missing]), cls),
                f"field {name} missing",
            )

    check_decoder_on_mutations(
        lambda b: decode(b, cls), raw, mutations=mutations, seed=cls.wire_tag
    )


def check_decoder_on_mutations(
    decoder: Any, raw: bytes, *, mutations: int = 200, seed: object = 0
) -> None:
    """Flip, insert, delete and truncate bytes of `raw`: `decoder` may only raise ProtocolError."""
    rng = random.Random(repr(seed))
    for i in range(mutations):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            op, pos = rng.randrange(3), rng.randrange(max(1, len(data)))
            if op == 0 and data:
                data[pos] = rng.randrange(256)
            elif op == 1:
                data.insert(pos, rng.randrange(256))
            elif data:
                del data[pos]
        try:
            decoder(bytes(data))
        except ProtocolError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"mutation {i} of {bytes(data)!r} raised {exc!r}") from exc
