"""`ConnectionEvents`: a libp2p network notifee that ignores every event unless a subclass cares.

py-libp2p's `INotifee` makes each subscriber implement all six callbacks; ours only ever want
one or two of them. It sits in protocol/ (the lowest layer that may import libp2p) because dht/
watches connections too, and dht/ may not import node/.
"""

from __future__ import annotations

from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from multiaddr import Multiaddr


class ConnectionEvents(INotifee):
    async def connected(self, network: INetwork, conn: INetConn) -> None:
        return None

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        return None

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None
