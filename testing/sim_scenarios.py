"""What the scale simulation measures at one network size, on the simulated Internet (sim_*.py).
Run each under `trio.testing.MockClock(autojump_threshold=0)`; times are simulated seconds.

`dht_scenario`: n real DHT nodes join over `join_window` s, a sample of them publishes peer
records, and from `join_window + settle` s on, for `window` s, nodes crash and join at the
measured churn rate while random nodes look the records up: hops, latency, success, and every
node's traffic. Joins spread over a minute, then 20 s on, spread each node's minutely refresh
evenly over the window's minute: the window sees the steady state's traffic.

`gossip_scenario`: n real CRDT replicators of one run and n real update-gossip members on one
gossip mesh. One member writes one change (its progress counter): the time until every replica
holds it, and the traffic of replication (gossip plus anti-entropy) per node; then one member
announces an outer update: the time until 50%, 99% and all of the nodes have recorded it.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.dht import DhtConfig, peer_record_key
from peertrain.swarm.exchange.gossip import UpdateGossip

from .crdt_network import new_run
from .sim_dht import GetResult, open_sim_dht
from .sim_gossip import GossipNet
from .sim_net import Traffic

# Peer records are published by a sample of nodes (`records`), not by all: at 10k nodes every
# node's own put would double the join's cost in CPU time without changing what a lookup does.
SIM_DHT_CONFIG = DhtConfig(publish_peer_record=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DhtFigures:
    n: int
    gets: list[GetResult]
    msgs_per_node_min: float
    bytes_per_node_min: float
    busiest_msgs_per_min: float
    crashed: int
    joined: int
    table_mean: float
    conns_mean: float

    @property
    def found(self) -> float:
        return sum(g.found for g in self.gets) / max(1, len(self.gets))


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipFigures:
    n: int
    converged: float  # share of replicas that hold the change
    converge_p50: float
    converge_max: float
    msgs_per_node_min: float
    bytes_per_node_min: float
    reach: float  # share of members that recorded the announcement
    reach_50: float
    reach_99: float
    reach_all: float | None  # None: some member never recorded it
    duplicates_per_node: float


def per_minute(before: Traffic, after: Traffic, nodes: int, seconds: float) -> tuple[float, float]:
    scale = 60.0 / seconds / max(1, nodes)
    return (after.messages - before.messages) * scale, (after.bytes - before.bytes) * scale


async def dht_scenario(
    n: int, *, seed: int = 0, join_window: float = 60.0, settle: float = 20.0,
    records: int = 64, gets: int = 100, window: float = 20.0, churn: bool = True,
) -> DhtFigures:  # fmt: skip
    async with open_sim_dht(n, seed=seed, config=SIM_DHT_CONFIG) as sim:
        await sim.join_all(window=join_window)
        await trio.sleep(settle)  # every node's first wide walk (5-15 s after its bootstrap)
        writers = sim.rng.sample(sim.nodes, min(records, n))
        async with trio.open_nursery() as nursery:
            for dht in writers:
                nursery.start_soon(dht.publish_peer_record)
        keys = [peer_record_key(dht.own) for dht in writers]
        before, nodes_before = sim.net.snapshot()
        results: list[GetResult] = []
        moved = (0, 0)

        async def one_get(delay: float) -> None:
            await trio.sleep(delay)
            results.append(await sim.timed_get(sim.rng.choice(sim.live()), sim.rng.choice(keys)))

        async with trio.open_nursery() as nursery:
            for _ in range(gets):
                nursery.start_soon(one_get, sim.rng.uniform(0, window))
            if churn:
                moved = await sim.churn(seconds=window)
            else:
                await trio.sleep(window)
            after, nodes_after = sim.net.snapshot()
        busiest = max(
            (t.messages - nodes_before.get(i, Traffic()).messages for i, t in nodes_after.items()),
            default=0,
        )
        msgs, nbytes = per_minute(before, after, len(sim.live()), window)
        return DhtFigures(
            n=n,
            gets=results,
            msgs_per_node_min=msgs,
            bytes_per_node_min=nbytes,
            busiest_msgs_per_min=busiest * 60.0 / window,
            crashed=moved[0],
            joined=moved[1],
            table_mean=statistics.mean(len(d.table) for d in sim.live()),
            conns_mean=statistics.mean(len(d.host.conns) for d in sim.live()),  # type: ignore[attr-defined]
        )


async def gossip_scenario(n: int, *, seed: int = 0, window: float = 20.0) -> GossipFigures:
    rng = random.Random(seed)
    keys = [create_new_key_pair(rng.randbytes(32)) for _ in range(n)]
    peers = [ID.from_pubkey(k.public_key).to_base58() for k in keys]
    run_id, manifest = new_run(keys[0], name="scale-sim")
    net = GossipNet(peers, seed=seed)
    converged_at: dict[int, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(net.run)
        replicas = []
        for i, key_pair in enumerate(keys):
            state = RunState(run_id)
            state.accept_manifest(manifest)
            endpoint = net.endpoints[i]
            rep = Replicator(
                state=state, key_pair=key_pair, pubsub=endpoint, exchange=endpoint, seed=i
            )
            endpoint.serve(rep.handle_sync)
            await nursery.start(rep.run)
            replicas.append(rep)
        writer = replicas[0]
        writer.writer.announce(role="trainer", addrs=["/sim/0"], lease_ms=600_000)
        await trio.sleep(10.0)  # the creator's membership reaches everyone first
        writer.writer.add_progress(1)
        target = writer.state.summary()[writer.peer_id]
        start = trio.current_time()
        for i, rep in enumerate(replicas):
            rep.listeners.append(_on_change(rep, i, writer.peer_id, target, converged_at, start))
        before = net.traffic.copy()
        await trio.sleep(window)
        msgs, nbytes = per_minute(before, net.traffic, n, window)
        times = sorted(converged_at.values())
        reach = await _announce(net, keys, peers, run_id, rng)
        nursery.cancel_scope.cancel()
    return GossipFigures(
        n=n,
        converged=(len(times) + 1) / n,  # the writer holds its own change
        converge_p50=times[len(times) // 2] if times else float("inf"),
        converge_max=times[-1] if len(times) == n - 1 else float("inf"),
        msgs_per_node_min=msgs,
        bytes_per_node_min=nbytes,
        duplicates_per_node=net.duplicates / n,
        **reach,
    )


def _on_change(
    rep: Replicator, i: int, owner: str, target: bytes, seen: dict[int, float], start: float
):
    def listener(changed: str) -> None:
        if changed == owner and i not in seen and rep.state.summary().get(owner) == target:
            seen[i] = trio.current_time() - start

    return listener


async def _announce(net: GossipNet, keys, peers, run_id: str, rng: random.Random) -> dict:
    """One member announces an update; when each member's update gossip recorded it."""
    topic = f"/peertrain/{run_id}/updates"
    nbytes = 1 << 20  # only the announcement travels here; its size field is all that differs
    sender = rng.randrange(len(peers))
    recorded = _Recorded(expected=len(peers) - 1)
    gossips = []
    for i, key_pair in enumerate(keys):
        gossip = UpdateGossip(
            run_id=run_id, key_pair=key_pair, transport=net.endpoints[i].group(topic),
            expected_nbytes=nbytes, is_member=lambda _peer: True,
            expected=lambda _round, s=peers[sender]: {s},
        )  # fmt: skip
        net.endpoints[i].validate_only(topic, _recording(gossip, i, peers[sender], recorded))
        gossips.append(gossip)
    start = trio.current_time()
    payload = bytes(nbytes)  # zeros: only its announcement travels here
    await gossips[sender].exchange(0, payload, deadline=start + 1.0)
    with trio.move_on_after(15.0):
        await recorded.everyone.wait()
    times = sorted(t - start for t in recorded.times.values())
    n = len(peers) - 1
    return {
        "reach": len(times) / n,
        "reach_50": times[n // 2] if len(times) > n // 2 else float("inf"),
        "reach_99": times[int(n * 0.99) - 1] if len(times) >= int(n * 0.99) else float("inf"),
        "reach_all": times[-1] if len(times) == n else None,
    }


@dataclass
class _Recorded:
    """When each member first recorded the announcement."""

    expected: int
    times: dict[int, float] = field(default_factory=dict)
    everyone: trio.Event = field(default_factory=trio.Event)

    def note(self, member: int) -> None:
        if member not in self.times:
            self.times[member] = trio.current_time()
            if len(self.times) >= self.expected:
                self.everyone.set()


def _recording(gossip: UpdateGossip, i: int, sender: str, recorded: _Recorded):
    def validator(origin: str, raw: bytes) -> bool:
        ok = gossip.validate(origin, raw)
        if ok and gossip.signed_checksum(0, sender) is not None:
            recorded.note(i)
        return ok

    return validator
