"""Receive buffers for outer updates, reused from round to round instead of faulted in anew.

A fresh 100 MB buffer costs its first writer ~25 000 page faults: about 60 ms of kernel time per
payload here, paid on the event loop while the chunks arrive, three times per round for four
members, which was a sixth of the whole round's CPU (benchmarks/update_round.py). Every round
receives payloads of the same size, so the memory of old rounds' payloads is recycled.

Ownership is by reference, not by bookkeeping: each buffer is a `bytearray` the pool keeps, lent
out as a uint8 tensor over it. Everything that keeps a payload alive — the update gossip's dict,
the tensor store serving it on, any torch view, numpy array or memoryview derived from it — holds
a reference to that bytearray (through torch's storage or the buffer export), so a buffer is idle
exactly when the pool's own reference is the only one left. Idle buffers are found when the next
one is asked for; a buffer is never reused while anything can still read it.

Bounded: at most `max_free` idle buffers are kept; more are simply freed.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _baseline_refcount() -> int:
    """References to a lent bytearray when nobody but the pool holds it, seen from `_reclaim`."""
    lent = [bytearray(1)]
    for buf in lent:
        return sys.getrefcount(buf)
    raise AssertionError


_IDLE_REFS = _baseline_refcount()


class ReceiveBuffers:
    def __init__(self, *, max_free: int = 8) -> None:
        self.max_free = max_free
        self._lent: list[bytearray] = []
        self._free: list[bytearray] = []
        self._lock = threading.Lock()  # acquired from the event loop and from worker threads
        self.reused = 0
        self.allocated = 0

    def acquire(self, nbytes: int) -> torch.Tensor:
        """A uint8 tensor of exactly `nbytes`, recycled when one is idle (contents undefined)."""
        import torch

        with self._lock:
            self._reclaim()
            buf = next((b for b in self._free if len(b) == nbytes), None)
            if buf is None:
                buf = bytearray(nbytes)
                self.allocated += 1
            else:
                self._free.remove(buf)
                self.reused += 1
            self._lent.append(buf)
            return torch.frombuffer(buf, dtype=torch.uint8)

    def reserve(self, count: int, nbytes: int) -> None:
        """Fault in `count` idle buffers now (off the event loop), ready for later rounds."""
        with self._lock:
            self._reclaim()
            have = sum(len(b) == nbytes for b in self._free)
        leases = [self.acquire(nbytes) for _ in range(max(0, count - have))]
        for lease in leases:
            lease.fill_(1)  # write every page (a fresh bytearray may be untouched zero pages)

    def idle(self, nbytes: int) -> int:
        with self._lock:
            self._reclaim()
            return sum(len(b) == nbytes for b in self._free)

    def _reclaim(self) -> None:
        still_lent = []
        for buf in self._lent:
            if sys.getrefcount(buf) > _IDLE_REFS:
                still_lent.append(buf)
            elif len(self._free) < self.max_free:
                self._free.append(buf)
        self._lent = still_lent
