"""A seeded, structure-aware mutator and a runner that feeds its inputs to protocol handlers.

Seeds are real encoded messages (fuzz_targets.py builds them with the product's own encoders).
Some mutations work on the bytes (flip, insert, delete, truncate, splice, repeat); most
decode the seed (msgpack or JSON), change one value deep inside it to an edge case (boundary
integers, empty and huge strings, wrong types, dropped or extra keys, nesting) and encode it
again, so inputs get past the outer parser into the checks behind it. A target may also `wrap`
a mutated payload (sign it, as a stranger can) so that signature checks do not stop them all.

The runner counts crashes (any exception a handler does not document as a refusal), hangs (an
input over `per_input` seconds of CPU, or 5× that waiting in an async handler) and memory growth
(RSS after a warm-up slice, and over the second half alone).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import psutil
import trio

EDGE_INTS = (0, 1, -1, 2**31, 2**32 - 1, 2**63 - 1, -(2**63), 2**64 - 1, 10**18)
EDGE_VALUES: tuple[Any, ...] = ("", "\x00", "é" * 300, "x" * 5000, b"", b"\xff" * 65, None, True,
                                1.5, float("nan"), [], {}, [[[[]]]], {"": None})  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class FuzzTarget:
    """One handler: `handle(data)` (sync or async) gets each input. `refusals`: the exception
    types it documents for bad input (not crashes)."""

    name: str
    seeds: Sequence[bytes]
    handle: Callable[[bytes], Any]
    refusals: tuple[type[BaseException], ...] = ()
    shape: str = "msgpack"  # or "json", "bytes"
    wrap: Callable[[bytes], bytes] | None = None  # e.g. sign a mutated payload


@dataclass(slots=True)
class FuzzResult:
    name: str
    inputs: int = 0
    refused: int = 0
    crashes: int = 0
    hangs: int = 0
    slowest_ms: float = 0.0
    seconds: float = 0.0
    rss_growth_mib: float = 0.0  # from the warm-up tenth to the end
    rss_growth_late_mib: float = 0.0  # over the second half alone: ~0 unless growth is unbounded
    first_crash: str | None = None
    crash_kinds: dict[str, int] = field(default_factory=dict)


class Mutator:
    def __init__(self, seeds: Sequence[bytes], *, shape: str, seed: int = 0) -> None:
        self.seeds, self.shape = list(seeds), shape
        self.rng = random.Random(seed)
        self._decoded = [self._decode(s) for s in self.seeds]

    def next(self) -> bytes:
        index = self.rng.randrange(len(self.seeds))
        decoded = self._decoded[index]
        if decoded is not _UNDECODABLE and self.rng.random() < 0.7:
            value = self._mutate_value(_copy(decoded), depth=0)
            try:
                data = self._encode(value)
            except (TypeError, ValueError, OverflowError):  # NaN in JSON, ints beyond msgpack
                data = self.seeds[index]
            return self._mutate_bytes(data) if self.rng.random() < 0.2 else data
        return self._mutate_bytes(self.seeds[index])

    # -- bytes -------------------------------------------------------------------------------
    def _mutate_bytes(self, raw: bytes) -> bytes:
        rng, data = self.rng, bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            op, pos = rng.randrange(7), rng.randrange(len(data) + 1)
            if op == 0 and data:
                data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif op == 1:
                data.insert(pos, rng.choice((0, 0xFF, 0x7F, 0x80, 0xC1, 0xDD, rng.randrange(256))))
            elif op == 2 and data:
                del data[min(pos, len(data) - 1) : pos + rng.randint(1, 8)]
            elif op == 3:
                del data[pos:]
            elif op == 4:
                other = rng.choice(self.seeds)
                start = rng.randrange(len(other) + 1)
                data[pos:pos] = other[start : start + rng.randint(1, 64)]
            elif op == 5 and data:
                piece = data[pos : pos + rng.randint(1, 16)]
                data[pos:pos] = piece * rng.randint(2, 64)
            else:
                data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        return bytes(data)

    # -- structure ---------------------------------------------------------------------------
    def _decode(self, raw: bytes) -> Any:
        try:
            if self.shape == "json":
                return json.loads(raw)
            if self.shape == "msgpack":
                return msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            pass
        return _UNDECODABLE

    def _encode(self, value: Any) -> bytes:
        if self.shape == "json":
            return json.dumps(value).encode() + b"\n"
        return msgpack.packb(value, use_bin_type=True)

    def _mutate_value(self, value: Any, depth: int) -> Any:
        rng = self.rng
        if isinstance(value, dict) and value and rng.random() < 0.8:
            key = rng.choice(list(value))
            roll = rng.random()
            if roll < 0.15:
                del value[key]
            elif roll < 0.25:
                value[rng.choice(("x", "", "id", "params"))] = self._edge(value[key])
            else:
                value[key] = self._mutate_value(value[key], depth + 1)
            return value
        if isinstance(value, list) and value and rng.random() < 0.8:
            # a message is [tag, fields]: its tag mostly kept, so the fields' checks are reached
            skip_tag = depth == 0 and len(value) > 1 and rng.random() < 0.9
            index = rng.randrange(1 if skip_tag else 0, len(value))
            roll = rng.random()
            if roll < 0.1:
                del value[index]
            elif roll < 0.2:
                value.extend([value[index]] * rng.randint(1, 40))
            else:
                value[index] = self._mutate_value(value[index], depth + 1)
            return value
        return self._edge(value)

    def _edge(self, value: Any) -> Any:
        rng = self.rng
        if isinstance(value, bool) or rng.random() < 0.15:
            return rng.choice(EDGE_VALUES)
        if isinstance(value, int):
            return rng.choice(EDGE_INTS) + rng.choice((0, 0, 1, -1))
        if isinstance(value, str):
            return rng.choice(("", value * rng.randint(2, 50), value[::-1], value + "\x00"))
        if isinstance(value, bytes):
            return rng.choice((b"", value[:-1], value + b"\x00", rng.randbytes(len(value))))
        return rng.choice(EDGE_VALUES)


_UNDECODABLE = object()


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


async def run_target(
    target: FuzzTarget, *, inputs: int, seed: int = 0, per_input: float = 1.0,
    seconds: float | None = None,
) -> FuzzResult:  # fmt: skip
    """Feed `inputs` mutations (or as many as fit in `seconds`) to `target.handle`."""
    mutator = Mutator(target.seeds, shape=target.shape, seed=seed)
    result = FuzzResult(target.name)
    process = psutil.Process()
    warm, half = max(1, inputs // 10), max(1, inputs // 2)
    rss_warm = rss_half = process.memory_info().rss
    started = time.perf_counter()
    for i in range(inputs):
        if seconds is not None and time.perf_counter() - started > seconds:
            break
        data = mutator.next()
        if target.wrap is not None and mutator.rng.random() < 0.5:
            data = target.wrap(data)
        await _one(target, data, result, per_input)
        await trio.lowlevel.checkpoint()  # lets trio drop the deadlines of finished waits
        if i + 1 == warm:
            rss_warm = process.memory_info().rss
        if i + 1 == half:
            rss_half = process.memory_info().rss
    result.seconds = round(time.perf_counter() - started, 2)
    rss_end = process.memory_info().rss
    result.rss_growth_mib = round((rss_end - rss_warm) / 2**20, 1)
    result.rss_growth_late_mib = round((rss_end - rss_half) / 2**20, 1)
    return result


async def _one(target: FuzzTarget, data: bytes, result: FuzzResult, per_input: float) -> None:
    result.inputs += 1
    began = time.thread_time()  # CPU time: a loaded machine's scheduling is no hang
    waited_too_long = False
    try:
        outcome = target.handle(data)
        if isinstance(outcome, Awaitable):
            # waiting is bounded in wall time, with room for a loaded machine's scheduling (a
            # scope only around a wait: trio keeps each scope's deadline until it passes)
            with trio.move_on_after(max(5.0, 5 * per_input)) as scope:
                await outcome
            waited_too_long = scope.cancelled_caught
    except target.refusals:
        result.refused += 1
    except Exception as exc:  # noqa: BLE001 - a crash is what the fuzzer counts
        result.crashes += 1
        kind = f"{type(exc).__name__}: {str(exc)[:80]}"
        result.crash_kinds[kind] = result.crash_kinds.get(kind, 0) + 1
        result.first_crash = result.first_crash or f"{kind} on {data[:120]!r}"
    spent = time.thread_time() - began
    if waited_too_long or spent > per_input:  # a sync handler cannot be cancelled: timed
        result.hangs += 1
    result.slowest_ms = max(result.slowest_ms, round(spent * 1000, 2))
