"""One role of a NAT experiment, run as a script inside a namespace (tests and benchmarks/nat.py).

    nat_node.py relay --listen ADDR                 circuit relay v2 hop with explicit limits
    nat_node.py sink  --listen ADDR [--relay FULL …] [--reservations K]
                                                    receives payloads; holds reservations on K of
                                                    the relays, replacing one that goes away
    nat_node.py send  --to FULL --bytes N [--punch SECONDS --listen ADDR]
                                                    connects (directly, or through the circuit
                                                    address when --to names one) and sends N bytes

Every role prints JSON lines: first {"addr": …} (and {"circuit": …, "reserve_ms": …} after a
reservation), `send` prints {"connect_s", "seconds", "mb_per_s", "relayed"} and exits. Servers
run until stdin closes. The payload protocol is 8 bytes of length, the bytes, then b"ok" back.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.config import RelayConfig
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID, CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr
from peertrain.node.host import build_host, parse_peer_addr
from peertrain.node.identity import Identity

PAYLOAD = "/peertrain-test/payload/1.0.0"
CHUNK = 1 << 20
LIMITS = RelayLimits(  # explicit: a relay must bound what strangers can make it carry
    duration=600, data=1 << 30, max_circuit_conns=16, max_reservations=16, reservation_ttl=3600
)


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


async def serve_payloads(stream) -> None:
    header = await read_exactly(stream, 8)
    remaining = int.from_bytes(header, "big")
    while remaining:
        chunk = await stream.read(min(remaining, CHUNK))
        if not chunk:
            return
        remaining -= len(chunk)
    await stream.write(b"ok")
    await stream.close()


async def read_exactly(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await stream.read(n - len(data))
        if not chunk:
            raise EOFError("stream ended early")
        data += chunk
    return data


async def until_stdin_closes() -> None:
    await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def main(args: argparse.Namespace) -> None:
    host = build_host(Identity.generate(), dial_timeout=10.0)
    listen = [Multiaddr(args.listen)] if args.listen else []
    relay = CircuitV2Protocol(host, limits=LIMITS, allow_hop=args.role == "relay")
    dcutr = DCUtRProtocol(host)  # answers (sink) or starts (send --punch) hole punching
    async with (
        host.run(listen),
        background_trio_service(relay),
        background_trio_service(dcutr),
        trio.open_nursery() as nursery,
    ):
        transport = CircuitV2Transport(host, relay, RelayConfig())
        if listen:
            emit(addr=f"{host.get_addrs()[0]}")
        if args.role == "relay":
            await until_stdin_closes()
        elif args.role == "sink":
            host.set_stream_handler(PAYLOAD, serve_payloads)
            if args.relay:
                keeper = ReservationKeeper(host, transport, args.relay, want=args.reservations)
                nursery.start_soon(keeper.run, nursery)
            await until_stdin_closes()
        else:
            await send(host, transport, dcutr, args)
        nursery.cancel_scope.cancel()


class ReservationKeeper:
    """Holds reservations on `want` relays out of the candidates; replaces one that goes away.

    A relay that stops closes its connections, so watching our connection to it is enough
    here; a relay whose machine vanishes silently needs a keepalive to be noticed (not done).
    Each new reservation is printed as {"circuit", "reserve_ms", "relay"}; a lost one as
    {"lost": relay}.
    """

    def __init__(self, host, transport: CircuitV2Transport, candidates: list[str], *, want: int):
        self.host, self.transport = host, transport
        self.candidates, self.want = candidates, want
        self.held: dict[str, ID] = {}  # relay address → relay peer ID

    async def run(self, nursery: trio.Nursery) -> None:
        while True:
            for addr, relay_id in list(self.held.items()):
                if not self.host.get_network().get_connections(relay_id):
                    del self.held[addr]
                    emit(lost=addr)
            for addr in self.candidates:
                if len(self.held) >= self.want:
                    break
                if addr not in self.held:
                    await self.reserve(addr, nursery)
            await trio.sleep(0.5)

    async def reserve(self, addr: str, nursery: trio.Nursery) -> None:
        relay = parse_peer_addr(addr)
        started = time.perf_counter()
        try:
            with trio.fail_after(5):
                await self.host.connect(relay)
                stream = await self.host.new_stream(relay.peer_id, [PROTOCOL_ID])
                if not await self.transport.reserve(stream, relay.peer_id, nursery):
                    return
        except Exception:  # relay down or refusing: try the next candidate
            return
        self.held[addr] = relay.peer_id
        circuit = f"{addr}/p2p-circuit/p2p/{self.host.get_id()}"
        emit(
            circuit=circuit, relay=addr, reserve_ms=round((time.perf_counter() - started) * 1000, 1)
        )


async def send(host, transport: CircuitV2Transport, dcutr, args: argparse.Namespace) -> None:
    to = Multiaddr(args.to)
    started = time.perf_counter()
    if "p2p-circuit" in args.to:
        relay_part, _, dest = args.to.partition("/p2p-circuit/p2p/")
        await host.connect(parse_peer_addr(relay_part))
        await transport.dial(to)
        peer = ID.from_base58(dest)
    else:
        info = parse_peer_addr(args.to)
        await host.connect(PeerInfo(info.peer_id, info.addrs))
        peer = info.peer_id
    connect_s = time.perf_counter() - started
    punch_s = None
    if args.punch and is_relayed(host, peer):
        started = time.perf_counter()
        with trio.move_on_after(args.punch):
            while is_relayed(host, peer) and not await dcutr.initiate_hole_punch(peer):  # noqa: ASYNC110
                await trio.sleep(0.2)
        punch_s = round(time.perf_counter() - started, 3)
    redialed = False
    if "p2p-circuit" in args.to and not host.get_network().get_connections(peer):
        # a failed DCUtR attempt sometimes ends the relayed connection too (py-libp2p 0.8.1,
        # seen with symmetric NATs): dial the circuit again rather than lose the peer
        await transport.dial(to)
        redialed = True
    stream = await host.new_stream(peer, [PAYLOAD])
    payload = bytes(CHUNK)
    started = time.perf_counter()
    await stream.write(args.bytes.to_bytes(8, "big"))
    for offset in range(0, args.bytes, CHUNK):
        await stream.write(payload[: min(CHUNK, args.bytes - offset)])
    if await read_exactly(stream, 2) != b"ok":
        raise SystemExit("no acknowledgement")
    seconds = time.perf_counter() - started
    emit(
        connect_s=round(connect_s, 4),
        seconds=round(seconds, 4),
        relayed=is_relayed(host, peer, stream),
        mb_per_s=round(args.bytes / seconds / 1e6, 1),
        punch_s=punch_s,
        redialed=redialed,
    )
    await stream.close()


def is_relayed(host, peer: ID, stream=None) -> bool:
    """Whether our connections to `peer` (or the one carrying `stream`) all run through a relay."""
    conns = host.get_network().get_connections(peer)
    if stream is not None:
        conns = [c for c in conns if getattr(c, "muxed_conn", None) is stream.muxed_conn]
    addrs = [str(a) for conn in conns for a in conn.get_transport_addresses()]
    return bool(addrs) and all("p2p-circuit" in a for a in addrs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["relay", "sink", "send"])
    parser.add_argument("--listen")
    parser.add_argument("--relay", action="append", default=[], help="relay(s) to reserve on / via")
    parser.add_argument("--reservations", type=int, default=1, help="relays to hold (sink)")
    parser.add_argument("--to")
    parser.add_argument("--bytes", type=int, default=16 << 20)
    parser.add_argument("--punch", type=float, default=0.0, help="seconds to try DCUtR (send)")
    trio.run(main, parser.parse_args())
