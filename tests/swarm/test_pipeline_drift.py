"""Drift between a stage's copies (swarm/pipeline/drift.py, averaging.py), averagers in one process:
a copy that differs from the stage's majority re-syncs from it within a round or two and the stage
is bitwise identical again; a 1-1 split is settled the same way on both sides; a normal run never
re-syncs. Fresh IDs serving the stage cannot vote an honest copy away: an anchor's copy decides
where it serves, and elsewhere a majority's state is taken only within what Adam could move."""

from __future__ import annotations

import dataclasses

import torch
import trio
from peertrain.swarm.models.mlp import MLPConfig
from peertrain.swarm.pipeline.averaging import StageAverager
from peertrain.swarm.pipeline.drift import Repair, flat_checksum, majority, state_checksum
from peertrain.swarm.pipeline.errors import ServerUnavailable
from peertrain.swarm.pipeline.migration import export_state
from peertrain.swarm.pipeline.slices import stage_slice
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.testing.pipelines import feed_random, flat_params

CONFIG = MLPConfig(hidden=32, depth=2)


def server() -> StageServer:
    module = stage_slice(CONFIG, 3, 2, seed=0)
    return StageServer(
        module, stage=2, is_last=True, optimizer=lambda ps: torch.optim.Adam(ps, lr=3e-3)
    )


def perturb(s: StageServer, by: float = 1e-3) -> None:
    with torch.no_grad():
        next(iter(s.module.parameters())).add_(by)


def replace(s: StageServer, value: float = 0.5) -> None:
    """What Sybil servers would hold: a state of their choosing, far from the stage's."""
    with torch.no_grad():
        for p in s.module.parameters():
            p.add_(value)


class Stage:
    """Averagers of one stage reaching each other by direct calls; `cut` holds (asker, peer) pairs
    whose gradient fetches fail (a peer left out by some servers but not others)."""

    def __init__(
        self, n: int, nursery: trio.Nursery, trusted: frozenset[str] | None = None
    ) -> None:
        self.names = [f"p{i}" for i in range(n)]
        self.servers = {name: server() for name in self.names}
        self.cut: set[tuple[str, str]] = set()
        self.blamed: list[tuple[str, str, str]] = []  # (who blamed, whom, why)
        self.nursery = nursery
        self.averagers = {
            name: StageAverager(
                s,
                me=name,
                fetch=self._fetch_for(name),
                peers=lambda me=name: [n for n in self.names if n != me],
                timeout=2.0,
                fetch_state=lambda peer: self.averagers[peer].export(),
                trusted=None if trusted is None else lambda: trusted,
                blame=lambda peer, why, me=name: self.blamed.append((me, peer, why)),
            )
            for name, s in self.servers.items()
        }

    def _fetch_for(self, me: str):
        async def fetch(peer: str, round_: int):
            if (me, peer) in self.cut:
                raise ServerUnavailable(f"{me} cannot reach {peer}")
            got = await self.averagers[peer].contribution(self.nursery, round_, me)
            if got is None:
                raise ServerUnavailable("round not kept")
            return got

        return fetch

    async def round(self, round_: int) -> None:
        for i, s in enumerate(self.servers.values()):
            feed_random(s, 4, seed=100 * round_ + i)
        await self.averagers[self.names[round_ % len(self.names)]].maybe_start(self.nursery, 4)
        with trio.fail_after(10):
            while any(a.completed < round_ for a in self.averagers.values()):  # noqa: ASYNC110
                await trio.sleep(0.01)

    def identical(self) -> bool:
        first = flat_params(self.servers[self.names[0]])
        return all(torch.equal(flat_params(s), first) for s in self.servers.values())

    def resyncs(self) -> dict[str, int]:
        return {name: a.drift.resyncs for name, a in self.averagers.items()}


async def test_a_perturbed_copy_resyncs_from_the_majority_within_two_rounds():
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery)
        for r in (1, 2):
            await stage.round(r)
        assert stage.identical()
        perturb(stage.servers["p2"])  # between rounds: its checksum after round 2 is already kept
        await stage.round(3)  # p2 applies round 3 to the perturbed state: its checksum differs
        assert not stage.identical()
        await stage.round(4)  # round 4 carries the round-3 checksums: p2 lost, adopts, applies
        assert stage.identical()
        assert stage.resyncs() == {"p0": 0, "p1": 0, "p2": 1}
        for r in (5, 6, 7):  # and it stays put
            await stage.round(r)
        assert stage.identical() and stage.resyncs() == {"p0": 0, "p1": 0, "p2": 1}
        stats = stage.averagers["p0"].drift.statistics()
        assert stats.drifted == 1 and stats.compared == 7  # rounds 0 (the initial state) to 6
        assert len({a.completed for a in stage.averagers.values()}) == 1
        nursery.cancel_scope.cancel()


async def test_a_peer_left_out_by_one_server_only_is_repaired_the_next_round():
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery)
        await stage.round(1)
        stage.cut = {("p0", "p2"), ("p2", "p0")}  # p0 and p2 cannot reach each other in round 2
        await stage.round(2)
        # p0 summed {p0, p1}, p2 summed {p1, p2}, p1 all three: three different copies
        sizes = {n: a.contributors[-1] for n, a in stage.averagers.items()}
        assert sizes == {"p0": 2, "p1": 3, "p2": 2}
        assert not stage.identical()
        stage.cut = set()
        await stage.round(3)
        assert stage.identical()
        # p0 and p2 each held a checksum of their own, p1 a third: a three-way tie, settled by the
        # largest checksum; whoever did not hold it re-synced, once
        assert sorted(stage.resyncs().values()) == [0, 1, 1]
        await stage.round(4)
        assert stage.identical() and sum(stage.resyncs().values()) == 2
        nursery.cancel_scope.cancel()


async def test_a_two_server_split_is_settled_by_the_larger_checksum():
    async with trio.open_nursery() as nursery:
        stage = Stage(2, nursery)
        await stage.round(1)
        perturb(stage.servers["p1"])
        await stage.round(2)
        before = {n: await a.checksum(2) for n, a in stage.averagers.items()}
        loser = min(before, key=before.__getitem__)
        await stage.round(3)
        assert stage.identical()
        assert stage.resyncs() == {n: int(n == loser) for n in stage.names}
        nursery.cancel_scope.cancel()


async def test_a_normal_run_never_resyncs():
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery)
        for r in range(1, 9):
            await stage.round(r)
        assert stage.identical()
        assert stage.resyncs() == {"p0": 0, "p1": 0, "p2": 0}
        assert all(a.drift.statistics().drifted == 0 for a in stage.averagers.values())
        assert stage.averagers["p1"].drift.statistics().compared == 8
        nursery.cancel_scope.cancel()


def test_majority_breaks_ties_by_the_larger_checksum_and_checksums_match_exports():
    assert majority({"a": b"\x01", "b": b"\x02"}) == (b"\x02", ["b"])
    assert majority({"a": b"\x01", "b": b"\x02", "c": b"\x01"}) == (b"\x01", ["a", "c"])
    s = server()
    feed_random(s, 4, seed=0)
    s.step(lambda flat, n: (flat, n))
    flat, adam_step = export_state(s)
    numel = sum(p.numel() for p in s.module.parameters())
    assert flat_checksum(flat, numel, adam_step) == state_checksum(s)
    assert flat_checksum(flat, numel, adam_step + 1) != state_checksum(s)
    perturb(s)
    assert flat_checksum(flat, numel, adam_step) != state_checksum(s)


async def test_three_fresh_servers_cannot_outvote_the_anchors_copy():
    async with trio.open_nursery() as nursery:
        stage = Stage(4, nursery, trusted=frozenset({"p0"}))  # p0: the run's creator
        await stage.round(1)
        for sybil in ("p1", "p2", "p3"):  # agree among themselves: the majority of reports
            replace(stage.servers[sybil])
        honest = flat_params(stage.servers["p0"])
        for r in (2, 3, 4):
            await stage.round(r)
        assert stage.resyncs()["p0"] == 0
        assert stage.averagers["p0"].drift.statistics().drifted >= 2
        # p0 stepped on its own state: far from where the fresh IDs stand
        distance = torch.linalg.vector_norm(flat_params(stage.servers["p0"]) - honest)
        assert distance < torch.linalg.vector_norm(flat_params(stage.servers["p1"]) - honest) / 10
        nursery.cancel_scope.cancel()


async def test_without_an_anchor_in_the_stage_a_majority_repairs_only_within_adams_reach():
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery, trusted=frozenset({"anchor-elsewhere"}))
        await stage.round(1)
        perturb(stage.servers["p2"])  # honest drift: the majority repairs it, as before
        for r in (2, 3):
            await stage.round(r)
        assert stage.identical() and stage.resyncs() == {"p0": 0, "p1": 0, "p2": 1}
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery, trusted=frozenset({"anchor-elsewhere"}))
        await stage.round(1)
        for sybil in ("p1", "p2"):
            replace(stage.servers[sybil])
        for r in (2, 3, 4, 5):
            await stage.round(r)
        drift = stage.averagers["p0"].drift.statistics()
        assert drift.resyncs == 0 and drift.failed >= 1  # it tried, and refused the state
        nursery.cancel_scope.cancel()


async def test_a_donor_claiming_a_far_later_round_is_believed_only_if_trusted():
    async with trio.open_nursery() as nursery:
        stage = Stage(2, nursery, trusted=frozenset({"p1"}))
        await stage.round(1)
        averager, before = stage.averagers["p0"], flat_params(stage.servers["p0"])

        async def ahead(peer):  # a claim about oneself is not a fact
            flat, adam_step, rounds = await stage.averagers[peer].export()
            return flat, adam_step, rounds + 5

        averager.fetch_state = ahead
        repair = Repair(round=1, checksum=b"?", donors=("p1",), trusted=frozenset())
        assert not await averager._adopt_from("p1", repair)
        assert torch.equal(flat_params(stage.servers["p0"]), before) and averager.completed == 1
        assert await averager._adopt_from(
            "p1", dataclasses.replace(repair, trusted=frozenset({"p1"}))
        )
        assert averager.completed == 6
        nursery.cancel_scope.cancel()


async def test_a_majority_serving_a_nan_state_is_refused_and_penalised():
    async with trio.open_nursery() as nursery:
        stage = Stage(3, nursery, trusted=frozenset({"anchor-elsewhere"}))
        await stage.round(1)
        for sybil in ("p1", "p2"):
            replace(stage.servers[sybil], float("nan"))
        for r in (2, 3, 4):
            await stage.round(r)
        assert stage.averagers["p0"].drift.resyncs == 0
        assert torch.isfinite(flat_params(stage.servers["p0"])).all()
        blamed = {(who, whom) for who, whom, why in stage.blamed if "NaN" in why}
        assert ("p0", "p1") in blamed or ("p0", "p2") in blamed
        nursery.cancel_scope.cancel()
