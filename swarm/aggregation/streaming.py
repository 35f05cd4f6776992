"""Chunked passes over p flat updates, so a rule never needs p extra full-size fp32 copies.

Every rule touches the d-dimensional data only through three passes, each of which walks the
coordinates in chunks of `chunk_size`:

* `accumulate_statistics` – squared norms, and the p×p Gram matrix when the rule asks for it
  (fp32 matmul per chunk, fp64 accumulation across chunks);
* `write_linear_combination` – out = Σ_i a_i g_i (mean, Multi-Krum, Flag Aggregator);
* `write_coordinatewise` – out[chunk] = reduce(p slices) per coordinate (median, trimmed mean).

Only the Gram pass stacks the p slices into one reused (p, window) buffer (a matmul needs them
side by side); the others work on the slices as read. Inputs arrive as `UpdateSource`s: anything
that can hand out an fp32 slice of itself. A received update kept int8-quantized can dequantize
one slice at a time; an in-memory tensor is wrapped in `TensorSource`. Peak extra memory is then
about 2·p·max(chunk_size, STATS_WINDOW) floats, whatever d is.

Determinism. The aggregate of a set of updates is bit-identical whatever `chunk_size` and torch's
thread count (tests/swarm/test_aggregation_determinism.py), because members that aggregated the
same set must reach the same state checksum. The write passes are elementwise, in input order.
The statistics pass has a fixed reduction tree: it works on windows of `STATS_WINDOW`
coordinates (assembled from reads of at most `chunk_size`; p × 256 KiB), sums a window's blocks
in one fixed-shape reduction, and adds window totals in coordinate order. (Reducing per chunk, a
chunk of 1000 coordinates cut the 1024-blocks elsewhere and Flag's output moved in its last
bits.) Norms alone are taken sixteen windows at a time, one reduction row per window: the same
tree with fewer torch calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

DEFAULT_CHUNK_SIZE = 1 << 20  # 4 MiB of fp32 per input per chunk: p=16 stacks to 64 MiB
_BLOCK = 1024  # fp32 dot products run over at most this many terms, then add up in fp64
STATS_WINDOW = 64 * _BLOCK  # the statistics pass's fixed windows: one reduction tree
_NORM_SPAN = 16 * STATS_WINDOW  # windows whose norms one set of torch calls computes
_CACHE_COLUMNS = 1 << 16  # coordinate-wise rules work on (p, 64K) blocks: 4 MiB at p = 16


@runtime_checkable
class UpdateSource(Protocol):
    """One flat update of `numel` fp32 values, readable a slice at a time."""

    @property
    def numel(self) -> int: ...

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Values [start, stop) as a 1-D fp32 tensor. It may be a view of the source's own
        buffer, valid only until the source's next `read`: the passes use or copy it at once."""
        ...


@dataclass(frozen=True, slots=True)
class TensorSource:
    """An update already in memory as a flat fp32 tensor."""

    tensor: torch.Tensor

    @property
    def numel(self) -> int:
        return self.tensor.numel()

    def read(self, start: int, stop: int) -> torch.Tensor:
        return self.tensor[start:stop]


def iter_chunks(numel: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """[start, stop) ranges covering 0..numel in order."""
    for start in range(0, numel, chunk_size):
        yield start, min(start + chunk_size, numel)


def _read(source: UpdateSource, start: int, stop: int) -> torch.Tensor:
    piece = source.read(start, stop)
    if piece.dtype != torch.float32 or piece.shape != (stop - start,):
        raise TypeError(
            f"{type(source).__name__}.read({start}, {stop}) returned "
            f"{piece.dtype} {tuple(piece.shape)}, expected float32 ({stop - start},)"
        )
    return piece


class _Stacker:
    """Reads the same slice of every source into one reused (p, chunk) buffer."""

    def __init__(self, sources: Sequence[UpdateSource], chunk_size: int) -> None:
        self._sources = sources
        self._chunk_size = chunk_size
        self._shape = (len(sources), min(STATS_WINDOW, sources[0].numel))
        self._buffer: torch.Tensor | None = None

    def stack(self, start: int, stop: int) -> torch.Tensor:
        view: torch.Tensor | None = None
        for row, source in enumerate(self._sources):
            for a, b in _pieces(start, stop, self._chunk_size):
                piece = _read(source, a, b)
                if self._buffer is None:  # on the device the sources live on
                    self._buffer = torch.empty(self._shape, device=piece.device)
                if view is None:
                    view = self._buffer[:, : stop - start]
                view[row, a - start : b - start].copy_(piece)
        assert view is not None
        return view


def _chunks(
    sources: Sequence[UpdateSource], chunk_size: int
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(p, window) stacks of every `STATS_WINDOW`, read in pieces of at most `chunk_size`."""
    stacker = _Stacker(sources, chunk_size)
    for start, stop in iter_chunks(sources[0].numel, STATS_WINDOW):
        yield start, stop, stacker.stack(start, stop)


@dataclass(frozen=True, slots=True, kw_only=True)
class InputStatistics:
    """What one pass learns about p inputs: squared norms and, if asked, their Gram matrix.

    Non-finite values show up as a NaN or Inf squared norm (and in that input's Gram row only).
    """

    sq_norms: torch.Tensor  # (p,) float64
    gram: torch.Tensor | None  # (p, p) float64, gram[i, j] = <g_i, g_j>


def accumulate_statistics(
    sources: Sequence[UpdateSource], *, chunk_size: int, with_gram: bool
) -> InputStatistics:
    """One pass: squared norms of every source, plus the Gram matrix when `with_gram`; reads of
    at most `chunk_size`, reduced per `STATS_WINDOW` whatever it is (see Determinism)."""
    p = len(sources)
    if with_gram:  # the Gram needs all p slices side by side
        gram = torch.zeros(p, p, dtype=torch.float64)
        for _, _, stack in _chunks(sources, chunk_size):
            gram += _blocked_gram(stack)
        return InputStatistics(sq_norms=gram.diagonal().clone(), gram=gram)
    totals = [  # norms need no stacking: one source at a time
        known if (known := getattr(s, "known_sq_norm", None)) is not None
        else source_sq_norm(s, chunk_size=chunk_size)
        for s in sources
    ]  # fmt: skip
    return InputStatistics(sq_norms=torch.tensor(totals, dtype=torch.float64), gram=None)


def source_sq_norm(source: UpdateSource, *, chunk_size: int) -> float:
    """One source's squared norm as the statistics pass takes it: fp64 window totals added in
    coordinate order. Reads of `chunk_size` are copied into whole spans first, so the value does
    not depend on it. A source may carry it precomputed as `known_sq_norm` (a payload measured
    while the next one was still arriving: swarm/exchange/payload_source.py)."""
    total = 0.0
    for start, stop in iter_chunks(source.numel, _NORM_SPAN):
        for window in _window_sq_norms(_read_window(source, start, stop, chunk_size)):
            total += window
    return total


def _read_window(source: UpdateSource, start: int, stop: int, chunk_size: int) -> torch.Tensor:
    """source[start:stop], read in pieces of at most `chunk_size`."""
    if stop - start <= chunk_size:
        return _read(source, start, stop)
    window = None
    for a, b in _pieces(start, stop, chunk_size):  # each piece copied before the next read
        piece = _read(source, a, b)
        if window is None:
            window = torch.empty(stop - start, device=piece.device)
        window[a - start : b - start].copy_(piece)
    assert window is not None
    return window


def _pieces(start: int, stop: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    for a in range(start, stop, chunk_size):
        yield a, min(a + chunk_size, stop)


def _blocked_gram(stack: torch.Tensor) -> torch.Tensor:
    """stack @ stack.T in fp64 accuracy at fp32 speed: fp32 matmuls over blocks of _BLOCK
    coordinates, summed in fp64. One fp32 matmul over a million coordinates is off by ~1e-6
    relative, enough to invent eigen-directions in the Gram of near-parallel updates (Flag)
    and to blur the small distances Multi-Krum ranks by; blocked, the error is ~1e-8."""
    p, c = stack.shape
    full = c - c % _BLOCK
    total = torch.zeros(p, p, dtype=torch.float64, device=stack.device)
    if full:
        blocks = stack[:, :full].reshape(p, full // _BLOCK, _BLOCK).transpose(0, 1)
        total += torch.bmm(blocks, blocks.transpose(1, 2)).sum(dim=0, dtype=torch.float64)
    if full < c:  # in fp32 too, so a sum of squares beyond fp32 range overflows everywhere alike
        tail = stack[:, full:]
        total += (tail @ tail.T).double()
    return total.cpu()


def _window_sq_norms(piece: torch.Tensor) -> list[float]:
    """Squared norms of each `STATS_WINDOW` of a 1-D fp32 slice that starts on a window
    boundary (only the last window may be short): per window, fp32 norms of its blocks of
    _BLOCK (like `_blocked_gram`), squared and summed in fp64. Whole windows go through one
    fixed-shape reduction per window row, however many of them the slice holds, so the result
    does not depend on how the vector was sliced (and one torch call serves sixteen windows:
    per window, the Python around the small ops cost more than the arithmetic)."""
    whole = piece.numel() - piece.numel() % STATS_WINDOW
    totals: list[float] = []
    if whole:
        norms = torch.linalg.vector_norm(piece[:whole].view(-1, _BLOCK), dim=1)
        totals += norms.double().square().view(-1, STATS_WINDOW // _BLOCK).sum(dim=1).tolist()
    if whole < piece.numel():  # the vector's last, short window
        rest = piece[whole:]
        full = rest.numel() - rest.numel() % _BLOCK
        total = 0.0
        if full:
            norms = torch.linalg.vector_norm(rest[:full].view(-1, _BLOCK), dim=1)
            total += float(norms.double().square().sum())
        if full < rest.numel():
            total += float(torch.linalg.vector_norm(rest[full:])) ** 2
        totals.append(total)
    return totals


def write_linear_combination(
    sources: Sequence[UpdateSource],
    coefficients: torch.Tensor,
    out: torch.Tensor,
    *,
    chunk_size: int,
) -> torch.Tensor:
    """out = Σ_i coefficients[i] · source_i, one chunk at a time. Returns `out`.

    Each slice is added straight into the output chunk (which stays in cache), no stacking copy.
    """
    weights = coefficients.tolist()
    for start, stop in iter_chunks(out.numel(), chunk_size):
        target = out[start:stop]
        for row, (weight, source) in enumerate(zip(weights, sources, strict=True)):
            piece = _read(source, start, stop)
            if row == 0:
                torch.mul(piece, weight, out=target)
            else:
                target.add_(piece, alpha=weight)
    return out


def write_coordinatewise(
    sources: Sequence[UpdateSource],
    reduce: Callable[[list[torch.Tensor]], torch.Tensor],
    out: torch.Tensor,
    *,
    chunk_size: int,
) -> torch.Tensor:
    """out[a:b] = reduce([source[a:b] for each source]) over column blocks. Returns `out`.

    Blocks are at most _CACHE_COLUMNS wide (whatever `chunk_size` says, if larger), so a sorting
    network's many elementwise passes run over data that stays in cache, and the slices are
    handed over as read, without a stacking copy.
    """
    for start, stop in iter_chunks(out.numel(), min(chunk_size, _CACHE_COLUMNS)):
        out[start:stop] = reduce([_read(source, start, stop) for source in sources])
    return out
