"""Our Noise session's send side against a peer that stops reading altogether.

The peer is a real host in its own process, frozen with SIGSTOP once connected: its socket
buffers fill, and every write system call would block. The send must give up after
`SEND_STALL_TIMEOUT` of no progress (trio's clock jumps over the wait) and close the connection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import trio
from libp2p.io.exceptions import ConnectionClosedError
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.node.net.transport import NoiseSession
from peertrain.node.net.transport.noise import SEND_STALL_TIMEOUT
from peertrain.testing.loopback_hosts import LOOPBACK, muxed, our_host

LISTENER = """
import trio
from peertrain.testing.loopback_hosts import LOOPBACK, our_host

async def main():
    host = our_host()
    async with host.run(LOOPBACK):
        print(host.get_id().to_base58(), host.get_addrs()[0], flush=True)
        await trio.sleep_forever()

trio.run(main)
"""

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")


async def test_a_send_to_a_peer_that_stopped_reading_gives_up_and_closes(mock_clock):
    mock_clock.rate = 1.0  # real speed while anything happens; jumps once all is idle
    mock_clock.autojump_threshold = 0.5
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", LISTENER], stdout=subprocess.PIPE
    )
    try:
        line = b""
        while not line.endswith(b"\n"):
            line += await proc.stdout.receive_some(1024)  # type: ignore[union-attr]
        peer_id, addr = line.decode().split()
        dialer = our_host()
        async with dialer.run(LOOPBACK):
            await dialer.connect(PeerInfo(ID.from_base58(peer_id), [Multiaddr(addr)]))
            session = muxed(dialer, ID.from_base58(peer_id)).secured_conn  # type: ignore[attr-defined]
            assert isinstance(session, NoiseSession)
            os.kill(proc.pid, signal.SIGSTOP)
            start = trio.current_time()
            with pytest.raises(ConnectionClosedError, match="took no data"):
                await session.write(bytes(256 << 20))  # far more than both socket buffers
            assert trio.current_time() - start >= SEND_STALL_TIMEOUT
            with pytest.raises(ConnectionClosedError):
                await session.write(b"after")
    finally:
        proc.kill()  # SIGKILL ends a stopped process too
        await proc.wait()
