"""netem in user space: a member's link as two TAP devices and a relay thread between them.

Some kernels have no `sch_netem` (and no `fq` to pace by departure time), so `tc` cannot delay
what a member sends. A TAP device is a network interface whose frames a process reads and
writes: the member's `eth0` is one TAP, its port on the LAN's bridge another, and a thread of the
process that made them moves every frame from one to the other. Frames the member sends are
dropped with probability `loss` and held for `delay ± jitter` before they reach the bridge, as
netem on the member's `eth0` would; frames to the member pass at once. Like netem, the queue
holds at most `LIMIT` frames (beyond it a frame is dropped); unlike netem's default, jitter
never reorders frames: a frame leaves no earlier than the one before it, as on a real path.

A TAP's file descriptor keeps working after its device is moved into another namespace, so the
relay runs in the caller's process (root, in the host's namespace) while its devices live in
the member's and the bridge's. Closing it deletes both devices, and the link is down.
"""

from __future__ import annotations

import fcntl
import os
import random
import selectors
import struct
import subprocess
import threading
import time
from collections import deque

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
LIMIT = 1000  # frames held, netem's default limit
FRAME = 65536
BATCH = 64  # frames read from one side before the other gets a turn


def why_unavailable() -> str | None:
    """None when TAP devices can be made here (/dev/net/tun readable and writable)."""
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        return "no /dev/net/tun: no user-space links (netem delay) here"
    return None


def _tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)} failed: {done.stderr.strip()}")


class TapRelay:
    """The link between namespace `member_ns` (its end named `eth0`) and the bridge `br0` of
    `bridge_ns` (its end named `port`), shaped by `shape` and relayed until `close`."""

    def __init__(self, member_ns: str, bridge_ns: str, port: str, *, seed: int = 0) -> None:
        tag = f"{os.getpid() % 10000}{port}"[-9:]
        inner, outer = f"ptm{tag}", f"ptb{tag}"
        self._member_fd, self._bridge_fd = _tap(inner), _tap(outer)
        _ip("link", "set", inner, "netns", member_ns)
        _ip("-n", member_ns, "link", "set", inner, "name", "eth0")
        _ip("link", "set", outer, "netns", bridge_ns)
        _ip("-n", bridge_ns, "link", "set", outer, "name", port)
        self._rng = random.Random(seed)
        self._loss, self._delay, self._jitter = 0.0, 0.0, 0.0
        self._held: deque[tuple[float, bytes]] = deque()
        self.sent = self.dropped = self.overflowed = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._relay, name=f"tap-{port}", daemon=True)
        self._thread.start()

    def shape(self, *, loss_pct: float, delay_ms: float, jitter_ms: float) -> None:
        self._loss, self._delay, self._jitter = loss_pct / 100, delay_ms / 1e3, jitter_ms / 1e3

    def unshape(self) -> None:
        self.shape(loss_pct=0, delay_ms=0, jitter_ms=0)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        for fd in (self._member_fd, self._bridge_fd):
            os.close(fd)

    # --- the relay thread -----------------------------------------------------------------
    def _relay(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._member_fd, selectors.EVENT_READ, self._from_member)
            selector.register(self._bridge_fd, selectors.EVENT_READ, self._to_member)
            while not self._closed.is_set():
                wait = 0.2
                if self._held:
                    wait = max(0.0, min(wait, self._held[0][0] - time.monotonic()))
                for key, _ in selector.select(wait):
                    key.data()
                self._release()

    def _frames(self, fd: int):
        for _ in range(BATCH):
            try:
                yield os.read(fd, FRAME)
            except BlockingIOError:
                return
            except OSError:  # the device went with its namespace: the link is down
                self._closed.set()
                return

    def _to_member(self) -> None:
        for frame in self._frames(self._bridge_fd):
            self._write(self._member_fd, frame)

    def _from_member(self) -> None:
        now = time.monotonic()
        for frame in self._frames(self._member_fd):
            if self._loss and self._rng.random() < self._loss:
                self.dropped += 1
                continue
            if not self._delay and not self._held:
                self._write(self._bridge_fd, frame)
                continue
            if len(self._held) >= LIMIT:
                self.overflowed += 1
                continue
            due = now + max(0.0, self._delay + self._rng.uniform(-self._jitter, self._jitter))
            if self._held:
                due = max(due, self._held[-1][0])  # jitter, not reordering
            self._held.append((due, frame))

    def _release(self) -> None:
        now = time.monotonic()
        while self._held and self._held[0][0] <= now:
            self._write(self._bridge_fd, self._held.popleft()[1])

    def _write(self, fd: int, frame: bytes) -> None:
        try:
            os.write(fd, frame)
            self.sent += 1
        except OSError:  # a full device queue or a device gone: lost, as on a wire
            self.dropped += 1
