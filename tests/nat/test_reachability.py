"""The dial-back reachability check on loopback: real hosts, real dials, no namespaces needed."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio
from libp2p.abc import INetConn, INetwork
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.node.nat.dialback import DialbackResponse, dial_targets
from peertrain.node.nat.reachability import ReachabilityCheck, decide, server_key
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.node.net.notifee import ConnectionEvents


@asynccontextmanager
async def running_host(listen: list[str]):
    host = build_host(Identity.generate(), dial_timeout=3.0)
    async with host.run([Multiaddr(a) for a in listen]):
        yield host


@asynccontextmanager
async def servers(n: int):
    async with trio.open_nursery() as nursery:
        hosts = []
        async with (
            running_host(["/ip4/127.0.0.1/tcp/0"]) as a,
            running_host(["/ip4/127.0.0.1/tcp/0"]) as b,
        ):
            for host in [a, b][:n]:
                await nursery.start(ReachabilityCheck(host, interval=3600).run)
                hosts.append(host)
            yield hosts
            nursery.cancel_scope.cancel()


async def connect_all(client, hosts) -> None:
    for host in hosts:
        await client.connect(PeerInfo(host.get_id(), host.get_addrs()))


async def test_listening_node_on_loopback_is_public():
    async with servers(2) as hosts, running_host(["/ip4/127.0.0.1/tcp/0"]) as client:
        await connect_all(client, hosts)
        with trio.fail_after(20):
            verdict = await ReachabilityCheck(client, serve=False).check()
        port = client.get_addrs()[0].value_for_protocol("tcp")
        assert verdict.status == "public", verdict
        assert verdict.addrs == (f"/ip4/127.0.0.1/tcp/{port}",)
        assert verdict.text.startswith("reachable directly at /ip4/127.0.0.1/tcp/")
        assert "(from this machine only: dialed back by 2+ peers)" in verdict.text


async def test_dial_back_uses_a_fresh_connection_not_the_existing_one():
    # the client connected out to both servers but listens nowhere: a server that reused the
    # existing connection (AutoNAT v1's mistake) would report it reachable
    async with servers(2) as hosts, running_host([]) as client:
        await connect_all(client, hosts)
        check = ReachabilityCheck(client, serve=False)
        check.host.get_addrs = lambda: [
            Multiaddr("/ip4/127.0.0.1/tcp/9")
        ]  # discard port: nobody there
        with trio.fail_after(20):
            verdict = await check.check()
        assert verdict.status == "private", verdict
        assert verdict.answers == 2
        assert verdict.text.startswith("behind NAT: peers see you as 127.0.0.1")
        assert "1. forward TCP port 9" in verdict.text


async def test_one_server_is_not_enough_to_decide():
    async with servers(1) as hosts, running_host(["/ip4/127.0.0.1/tcp/0"]) as client:
        await connect_all(client, hosts)
        with trio.fail_after(20):
            verdict = await ReachabilityCheck(client, serve=False).check()
        assert verdict.status == "unknown"
        assert "1 of the 2 peers" in verdict.text


def test_only_the_observed_ip_is_dialed():
    candidates = (
        "/ip4/192.168.1.5/tcp/4001",
        "/ip4/203.0.113.9/tcp/4002",
        "/dns4/x/tcp/1",
        "garbage",
    )
    targets = [str(t) for t in dial_targets(candidates, "203.0.113.9")]
    assert targets == ["/ip4/203.0.113.9/tcp/4002", "/ip4/203.0.113.9/tcp/4001"]
    many = tuple(f"/ip4/10.0.0.1/tcp/{p}" for p in range(4000, 4020))
    assert len(dial_targets(many, "10.0.0.1")) == 4


def test_an_address_needs_two_confirmations():
    one = DialbackResponse(
        request_id=1, observed="1.2.3.4", reached=("/ip4/1.2.3.4/tcp/1",), tried=()
    )
    none = DialbackResponse(request_id=2, observed="1.2.3.4", reached=(), tried=())
    assert decide([one, none], peer_id="P", listen=[]).status == "private"
    assert decide([one, one], peer_id="P", listen=[]).status == "public"
    assert decide([one], peer_id="P", listen=[]).status == "unknown"


def test_a_private_node_with_relays_is_told_how_it_is_reached():
    none = DialbackResponse(request_id=2, observed="1.2.3.4", reached=(), tried=())
    circuit = "/ip4/5.6.7.8/tcp/4001/p2p/R/p2p-circuit/p2p/P"
    verdict = decide(
        [none, none], peer_id="P", listen=["/ip4/10.0.0.2/tcp/4001"], circuits=(circuit,)
    )
    assert verdict.status == "private"
    assert verdict.text.startswith(
        f"behind NAT (peers see you as 1.2.3.4): reachable through relays {circuit};"
    )
    assert "1. forward TCP port 4001 on your router to this machine (10.0.0.2:4001)" in verdict.text


async def test_an_undecided_node_asks_again_when_peers_arrive():
    async with servers(2) as hosts, running_host(["/ip4/127.0.0.1/tcp/0"]) as client:
        async with trio.open_nursery() as nursery:
            check = ReachabilityCheck(client, serve=False, retry=60)  # the timer alone: 60 s
            await nursery.start(check.run)
            assert check.current.status == "unknown"  # no peers yet
            await connect_all(client, hosts)
            with trio.fail_after(10):
                verdict = await check.wait_decided()
            assert verdict.status == "public"
            nursery.cancel_scope.cancel()


def _answer(reached: tuple[str, ...]) -> DialbackResponse:
    return DialbackResponse(request_id=1, observed="1.2.3.4", reached=reached, tried=())


def test_two_fresh_ids_on_one_prefix_cannot_decide_either_way():
    # peer IDs are free: two "servers" on one /24 (or /48) are one voice (ranking only: no
    # traffic goes to these addresses)
    same = [server_key("A", "8.8.8.7"), server_key("B", "8.8.8.9")]
    lie_public, lie_private = _answer(("/ip4/1.2.3.4/tcp/1",)), _answer(())
    assert decide([lie_public] * 2, servers=same, peer_id="P", listen=[]).status == "unknown"
    assert decide([lie_private] * 2, servers=same, peer_id="P", listen=[]).status == "unknown"
    six = [server_key("A", "2001:4860:4860::1"), server_key("B", "2001:4860:4860:1::2")]
    assert decide([lie_private] * 2, servers=six, peer_id="P", listen=[]).status == "unknown"
    distinct = [server_key("A", "8.8.8.7"), server_key("C", "9.9.9.9")]
    assert decide([lie_public] * 2, servers=distinct, peer_id="P", listen=[]).status == "public"
    assert decide([lie_private] * 2, servers=distinct, peer_id="P", listen=[]).status == "private"


def test_loopback_and_lan_servers_count_one_per_peer():
    assert server_key("A", "127.0.0.1") != server_key("B", "127.0.0.1")
    assert server_key("A", "10.0.0.1") != server_key("B", "10.0.0.2")
    assert server_key("A", None) != server_key("B", None)


class _Inbound(ConnectionEvents):
    """Every peer ID that connects, and the check's peer list at that moment."""

    def __init__(self, check: ReachabilityCheck) -> None:
        self.check = check
        self.seen: list[tuple[ID, list[ID]]] = []

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self.seen.append((conn.muxed_conn.peer_id, self.check.peers()))


async def test_dial_back_probes_never_show_among_the_clients_peers():
    async with servers(2) as hosts, running_host(["/ip4/127.0.0.1/tcp/0"]) as client:
        await connect_all(client, hosts)
        check = ReachabilityCheck(client, serve=False)
        inbound = _Inbound(check)
        client.get_network().register_notifee(inbound)
        with trio.fail_after(20):
            assert (await check.check()).status == "public"
        servers_ids = {h.get_id() for h in hosts}
        probes = [peer for peer, _ in inbound.seen if peer not in servers_ids]
        assert len(probes) >= 2, inbound.seen  # each server's probe reached us, as a stranger
        assert all(check.is_probe(p) for p in probes)
        # at the very moment each probe's handshake completed, it was not among the peers
        assert all(set(peers) <= servers_ids for _, peers in inbound.seen)
        assert set(check.peers()) == servers_ids


async def test_a_malformed_dial_back_request_is_penalised_and_the_server_serves_on():
    """Dial-back answers on node/net/rpc.py's `serve_one`: garbage costs its sender, as on every
    request/response protocol (it was only logged before)."""
    from peertrain.node.nat.dialback import DIALBACK
    from peertrain.node.net.penalties import PeerScoreboard
    from peertrain.protocol.framing import HEADER

    board = PeerScoreboard()
    async with (
        running_host(["/ip4/127.0.0.1/tcp/0"]) as server,
        running_host(["/ip4/127.0.0.1/tcp/0"]) as client,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(ReachabilityCheck(server, interval=3600, scoreboard=board).run)
        await connect_all(client, [server])
        stream = await client.new_stream(server.get_id(), [str(DIALBACK)])
        await stream.write(HEADER.pack(6) + b"\xc1" * 6)  # 0xc1: never valid msgpack
        with trio.fail_after(10):
            while board.score(client.get_id().to_base58()) < 20:  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
