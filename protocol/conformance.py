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
from collections.abc import Callable
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


def check_codec_roundtrip(
    codec: str, tensor: Any, *, block_size: int, tolerance: float, mutations: int = 50
) -> None:
    """A codec round-trips `tensor` within `tolerance` (relative L2) and decodes strictly.

    Also proves: the payload has exactly `payload_nbytes` bytes; decoding into `out` gives the
    same values; a payload one byte short or long, a wrong shape, dtype or codec, and random
    corruptions of the payload raise only ProtocolError.
    """
    import torch

    from . import codecs

    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = tuple(tensor.shape)
    payload = codecs.encode(tensor, codec, block_size=block_size).clone()
    expected_nbytes = codecs.CODECS[codec].payload_nbytes(tensor.numel(), block_size)
    assert payload.numel() == expected_nbytes, (
        f"{codec}: {payload.numel()} != {expected_nbytes} bytes"
    )

    def dec(p: Any, **overrides: Any) -> Any:
        kw: dict[str, Any] = dict(dtype=dtype, shape=shape, block_size=block_size) | overrides
        return codecs.decode(p, codec, **kw)

    back = dec(payload)
    assert back.dtype == tensor.dtype and tuple(back.shape) == shape, f"{codec}: wrong dtype/shape"
    ref, got = tensor.double(), back.double()
    error = float((got - ref).norm() / ref.norm()) if float(ref.norm()) else float(got.norm())
    assert error <= tolerance, f"{codec}: relative L2 error {error:.5f} > {tolerance}"
    out = torch.empty_like(back)
    assert torch.equal(dec(payload, out=out), back), f"{codec}: decoding into out differs"

    _check_refusals(codec, tensor, payload, dec, block_size=block_size)
    _check_corruptions(codec, payload, dec, seed=f"{codec}/{shape}/{block_size}", count=mutations)


def _check_refusals(
    codec: str, tensor: Any, payload: Any, dec: Callable[..., Any], *, block_size: int
) -> None:
    """Payloads of the wrong size and calls with wrong arguments raise DecodeError."""
    import torch

    from . import codecs

    dtype, shape = str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)
    bad_calls = {
        "short payload": lambda: dec(payload[:-1]),
        "long payload": lambda: dec(torch.cat([payload, torch.zeros(1, dtype=torch.uint8)])),
        "wrong shape": lambda: dec(payload, shape=(*shape, 2)),
        "unknown dtype": lambda: dec(payload, dtype="int64"),
        "unknown codec": lambda: codecs.decode(
            payload, "int3", dtype=dtype, shape=shape, block_size=block_size
        ),
        "zero block size": lambda: dec(payload, block_size=0),
    }
    for what, call in bad_calls.items():
        if tensor.numel() == 0 and what in ("wrong shape", "short payload"):
            continue  # (*shape, 2) of an empty tensor is still empty; nothing to cut
        if what == "wrong shape" and codecs.CODECS[codec].payload_nbytes(
            2 * tensor.numel(), block_size
        ) == codecs.CODECS[codec].payload_nbytes(tensor.numel(), block_size):
            continue  # int4 packs 1 and 2 values in one byte: the size cannot tell them apart
        _expect(DecodeError, call, f"{codec} {what}")


def _check_corruptions(
    codec: str, payload: Any, dec: Callable[..., Any], *, seed: str, count: int
) -> None:
    """Random corruptions of a valid payload raise only ProtocolError (or decode)."""
    rng = random.Random(seed)
    for i in range(count if payload.numel() else 0):
        corrupt = payload.clone()
        for _ in range(rng.randint(1, 8)):
            corrupt[rng.randrange(corrupt.numel())] = rng.randrange(256)
        try:
            dec(corrupt)
        except ProtocolError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{codec}: corruption {i} raised {exc!r}") from exc
