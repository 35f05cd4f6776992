"""Every protocol handler of a node as a fuzz target (fuzzing.py), with real seeds.

Each target drives the product's own decode and handle entry points in-process, on the objects
a daemon runs (a DHT node's responder, a run's Replicator and UpdateGossip, the tensor and RPC
servers over in-memory streams, peer exchange, dial-back, and a live daemon's control server),
so 100k inputs take seconds, not a network. Seeds are encoded by the product's own encoders.
What counts as a crash: anything but the refusals each handler documents; a handler that
catches its own bugs (RPC answers INTERNAL, the control server "internal error") is caught in
the act by reading its answer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator

import torch
import trio
import trio.testing
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.errors import CRDTError
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.crdt.signed import DELTA_DOMAIN, seal_delta
from peertrain.crdt.sync import SyncRequest
from peertrain.dht.messages import REQUEST_TYPES, FindNode, FindValue, Ping, Store
from peertrain.dht.namespaces import members_key, peer_record_key, runs_key
from peertrain.dht.node import Dht
from peertrain.dht.records import sign_entry
from peertrain.node.api.control import ControlServer
from peertrain.node.api.control_methods import control_methods
from peertrain.node.errors import ControlError
from peertrain.node.nat.dialback import DialbackRequest, DialbackResponse, dial_targets
from peertrain.node.nat.reachability import decide
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.node.net.penalties import PeerScoreboard
from peertrain.node.net.rpc import RpcServer
from peertrain.node.services.peer_exchange import (
    PEX,
    KnownPeer,
    PeerExchange,
    PeersRequest,
    PeersResponse,
)
from peertrain.protocol.envelope import seal
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.messages import ErrorCode, ErrorResponse, decode, encode
from peertrain.protocol.packing import pack
from peertrain.protocol.tensor_transfer import (
    TensorHeaderRequest,
    TensorRangeRequest,
    serve_tensor_request,
)
from peertrain.protocol.tensors import prepare_tensor
from peertrain.swarm.exchange.gossip import DOMAIN, UpdateAnnouncement, UpdateGossip
from peertrain.swarm.exchange.round_record import RECORD_DOMAIN, RoundRecord

from .byte_streams import TrioByteStream
from .crdt_network import new_run
from .fuzzing import FuzzTarget
from .gossip_attacks import _membership
from .memory_router import MemoryRouter
from .swarms import open_test_swarm

READ_ONLY_METHODS = ("status", "run.list")  # the control methods fuzzed: no run gets created
NBYTES = 4096


@contextlib.asynccontextmanager
async def open_targets() -> AsyncIterator[list[FuzzTarget]]:
    """Every target, ready; the control target talks to a live in-process daemon."""
    async with open_test_swarm(1) as (node,):
        yield [
            dht_target(),
            *crdt_targets(),
            update_gossip_target(),
            tensor_target(),
            rpc_target(),
            peer_exchange_target(),
            dialback_target(),
            control_target(node),
        ]


def _peer() -> tuple[object, str]:
    key = create_new_key_pair()
    return key, ID.from_pubkey(key.public_key).to_base58()


def dht_target() -> FuzzTarget:
    key, _ = _peer()
    node = Dht(build_host(Identity.generate()))
    asker = Identity.generate().peer_id
    entry = sign_entry(key, runs_key(), {"id": "ab" * 32, "name": "run"}, ttl=60)
    member = sign_entry(key, members_key("ab" * 32), {"addrs": ["/ip4/1.2.3.4/tcp/1"]}, ttl=60)
    seeds = [
        Ping(request_id=1, server=True),
        FindNode(request_id=2, target=os.urandom(32), server=False, count=20),
        FindValue(request_id=3, key=peer_record_key(asker), server=True),
        Store(request_id=4, entries=(entry, member), server=True),
    ]

    def handle(data: bytes) -> None:
        node.responder(asker, decode(data, REQUEST_TYPES))

    return FuzzTarget(
        name="dht", seeds=[encode(s) for s in seeds], handle=handle, refusals=(ProtocolError,)
    )


def crdt_targets() -> list[FuzzTarget]:
    creator, creator_id = _peer()
    stranger, stranger_id = _peer()
    victim, _ = _peer()
    run_id, manifest = new_run(creator)
    router = MemoryRouter()
    endpoint = router.endpoint(ID.from_pubkey(victim.public_key).to_base58())
    rep = Replicator(state=RunState(run_id), key_pair=victim, pubsub=endpoint, exchange=endpoint)
    now = _now_ms()
    writes = [
        (creator, creator_id, creator_id, 0),
        (stranger, stranger_id, stranger_id, 500),
        (stranger, stranger_id, creator_id, 0),  # a stranger writing the creator's slot
        (stranger, stranger_id, stranger_id, 59_000),  # just inside the drift window
    ]
    docs = [(k, i, _membership(owner, i, now + ahead)) for k, i, owner, ahead in writes]
    deltas = [
        seal_delta(k, i, run_id=run_id, seq=n, doc=doc).raw
        for n, (k, i, doc) in enumerate(docs, start=1)
    ]
    payloads = [pack([0, doc.to_wire()]) for _, _, doc in docs]  # what seal_delta signs

    def sign(payload: bytes) -> bytes:
        return seal(stranger, domain=DELTA_DOMAIN, run=run_id, round=7, payload=payload).to_bytes()

    def gossip(data: bytes) -> None:
        if rep.validate_gossip(stranger_id, data):
            rep.handle_gossip(stranger_id, data)

    def sync(data: bytes) -> None:
        rep.handle_sync(stranger_id, decode(data, SyncRequest))

    request = SyncRequest(
        request_id=1, run=run_id, has_manifest=True, summary={}, envelopes=tuple(deltas),
        manifest=manifest,
    )  # fmt: skip
    return [
        FuzzTarget(name="crdt gossip", seeds=deltas + payloads, handle=gossip, wrap=sign),
        FuzzTarget(
            name="crdt sync",
            seeds=[encode(request)],
            handle=sync,
            refusals=(ProtocolError, CRDTError),
        ),  # fmt: skip
    ]


def update_gossip_target() -> FuzzTarget:
    key, me = _peer()
    stranger, stranger_id = _peer()
    run_id = "ab" * 32
    router = MemoryRouter()
    endpoint = router.endpoint(me)
    gossip = UpdateGossip(
        run_id=run_id, key_pair=key, transport=endpoint.group("updates"), expected_nbytes=NBYTES,
        is_member=lambda p: p == me, expected=lambda _r: {me},
    )  # fmt: skip
    ann = UpdateAnnouncement(sender=stranger_id, nbytes=NBYTES, checksum=os.urandom(32))
    record = RoundRecord(start=os.urandom(32), updates=(), result=os.urandom(32))
    seeds = [
        seal(stranger, domain=DOMAIN, run=run_id, round=0, payload=encode(ann)).to_bytes(),
        seal(
            stranger, domain=RECORD_DOMAIN, run=run_id, round=0, payload=encode(record)
        ).to_bytes(),
        encode(ann),
        encode(record),
    ]

    def sign(payload: bytes) -> bytes:
        return seal(stranger, domain=DOMAIN, run=run_id, round=1, payload=payload).to_bytes()

    return FuzzTarget(
        name="update gossip", seeds=seeds, handle=lambda d: gossip.validate(stranger_id, d),
        wrap=sign,
    )  # fmt: skip


def tensor_target() -> FuzzTarget:
    prepared = prepare_tensor("w", torch.randn(1000), codec="fp32", chunk_size=1 << 16)
    checksum = prepared.header.checksum
    lookup = {checksum: prepared}.get
    seeds = [
        TensorHeaderRequest(request_id=1, checksum=checksum),
        TensorRangeRequest(request_id=2, checksum=checksum, first_chunk=0, count=1),
        TensorRangeRequest(request_id=3, checksum=os.urandom(32), first_chunk=0, count=4),
    ]

    async def handle(data: bytes) -> None:
        client, server = _stream_pair()
        await client.send_all(_frame(data))
        await client.send_eof()
        await serve_tensor_request(TrioByteStream(server), lookup, idle_timeout=0.5)

    return FuzzTarget(
        name="tensors", seeds=[encode(s) for s in seeds], handle=handle,
        refusals=(ProtocolError,),
    )  # fmt: skip


def rpc_target() -> FuzzTarget:
    """The RPC server (here serving peer exchange's request type) over an in-memory stream."""
    exchange = PeerExchange(build_host(Identity.generate()), PeerScoreboard())
    server = RpcServer(
        exchange.host, PEX, PeersRequest, exchange._answer, scoreboard=PeerScoreboard()
    )
    asker = Identity.generate().peer_id
    seeds = [encode(PeersRequest(request_id=9, limit=32)), encode(PeersRequest(request_id=1))]

    async def handle(data: bytes) -> None:
        client, end = _stream_pair()
        await client.send_all(_frame(data))
        await client.send_eof()
        await server._answer(asker, TrioByteStream(end))
        await end.aclose()  # what the RPC stream handler does after `_answer`
        answer = await client.receive_some()
        if answer:
            with contextlib.suppress(ProtocolError):
                reply = decode(answer[4:], (ErrorResponse,))
                if reply.code == ErrorCode.INTERNAL:
                    raise AssertionError("the RPC handler failed on this request")

    return FuzzTarget(name="rpc", seeds=seeds, handle=handle)


def peer_exchange_target() -> FuzzTarget:
    exchange = PeerExchange(build_host(Identity.generate()), PeerScoreboard(), target_peers=0)
    source = Identity.generate().peer_id
    peers = tuple(
        KnownPeer(peer_id=Identity.generate().peer_id.to_base58(),
                  addrs=("/ip4/1.2.3.4/tcp/4001", "/ip4/127.0.0.1/tcp/1", "/dns4/x.org/tcp/1"))
        for _ in range(3)
    )  # fmt: skip
    seeds = [encode(PeersResponse(request_id=1, peers=peers))]

    async def handle(data: bytes) -> None:  # target_peers=0: every entry checked, none dialed
        await exchange._dial_new(source, decode(data, PeersResponse).peers)

    return FuzzTarget(name="peer exchange", seeds=seeds, handle=handle, refusals=(ProtocolError,))


def dialback_target() -> FuzzTarget:
    request = DialbackRequest(request_id=1, addrs=("/ip4/1.2.3.4/tcp/4001", "/ip4/10.0.0.2/tcp/9"))
    response = DialbackResponse(
        request_id=1, observed="1.2.3.4", reached=("/ip4/1.2.3.4/tcp/4001",), tried=()
    )

    def handle(data: bytes) -> None:
        message = decode(data, (DialbackRequest, DialbackResponse))
        if isinstance(message, DialbackRequest):  # the server's side: what it would dial
            dial_targets(message.addrs, "1.2.3.4")
        else:  # the client's side: the verdict
            decide([message, message], servers=["a", "b"], peer_id="P", listen=[])

    return FuzzTarget(
        name="dial-back", seeds=[encode(request), encode(response)], handle=handle,
        refusals=(ProtocolError,),
    )  # fmt: skip


def control_target(node) -> FuzzTarget:
    methods = {k: v for k, v in control_methods(node).items() if k in READ_ONLY_METHODS}
    server = ControlServer(node.config.control_socket, methods)
    seeds = [
        json.dumps({"id": 1, "method": "status"}).encode() + b"\n",
        json.dumps({"id": 2, "method": "run.list", "params": {}}).encode() + b"\n",
        json.dumps({"id": 3, "method": "status", "params": {"x": [1, {"y": None}]}}).encode()
        + b"\n",
    ]

    async def handle(data: bytes) -> None:
        client, end = trio.testing.memory_stream_pair()
        await client.send_all(data if data.endswith(b"\n") else data + b"\n")
        await server._serve_one(end)
        reply = await client.receive_some()
        if b"internal error" in reply:
            raise AssertionError(reply[:200].decode(errors="replace"))

    return FuzzTarget(
        name="control API", seeds=seeds, handle=handle, shape="json", refusals=(ControlError,)
    )


def _stream_pair():
    return trio.testing.memory_stream_pair()


def _frame(data: bytes) -> bytes:
    from peertrain.protocol.framing import HEADER

    return HEADER.pack(len(data)) + data


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
