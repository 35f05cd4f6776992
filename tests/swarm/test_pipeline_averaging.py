"""Averaging within a stage by numbered all-gather rounds (swarm/pipeline/averaging.py): servers of
a stage end identical, equal to one server that saw every sample; whoever is ready first drives the
round; a dead peer is left out; a mover's state download reproduces its donor exactly."""

from __future__ import annotations

import torch
import trio
from peertrain.swarm.models.mlp import MLPConfig
from peertrain.swarm.pipeline.averaging import StageAverager
from peertrain.swarm.pipeline.errors import ServerUnavailable
from peertrain.swarm.pipeline.migration import export_state, import_state
from peertrain.swarm.pipeline.slices import stage_slice
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.testing.pipelines import feed_random, flat_params

CONFIG = MLPConfig(hidden=32, depth=2)


def server(optimizer: str = "adam") -> StageServer:
    make = (
        (lambda ps: torch.optim.SGD(ps, lr=0.1))
        if optimizer == "sgd"
        else (lambda ps: torch.optim.Adam(ps, lr=3e-3))
    )
    return StageServer(stage_slice(CONFIG, 3, 2, seed=0), stage=2, is_last=True, optimizer=make)


class Stage:
    """Averagers of one stage reaching each other by direct calls (the network's stand-in)."""

    def __init__(self, servers: list[StageServer], nursery: trio.Nursery) -> None:
        self.names = [f"p{i}" for i in range(len(servers))]
        self.dead: set[str] = set()
        self.averagers = {
            name: StageAverager(
                s, me=name, fetch=self._fetch_for(name), peers=self._peers_of(name), timeout=2.0
            )
            for name, s in zip(self.names, servers, strict=True)
        }
        self.nursery = nursery

    def _peers_of(self, me: str):
        return lambda: [n for n in self.names if n != me]

    def _fetch_for(self, me: str):
        async def fetch(peer: str, round_: int):
            if peer in self.dead:
                raise ServerUnavailable(f"{peer} is dead")
            got = await self.averagers[peer].contribution(self.nursery, round_, me)
            if got is None:
                raise ServerUnavailable("round not kept")
            return got

        return fetch


async def settle(stage: Stage, round_: int) -> None:
    with trio.fail_after(10):
        # rounds run in other tasks and expose no event to wait on
        while any(a.completed < round_ for n, a in stage.averagers.items() if n not in stage.dead):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_a_round_started_by_one_server_averages_every_servers_samples_exactly():
    # SGD here: against a reference that summed in another order, Adam's first step would turn
    # float noise on near-zero gradients into ±lr; among the stage's servers, equality is bitwise
    servers = [server("sgd") for _ in range(3)]
    reference = server("sgd")
    for i, (s, rows) in enumerate(zip(servers, (8, 16, 3), strict=True)):
        feed_random(s, rows, seed=i)
        feed_random(reference, rows, seed=i)  # one server that saw everything
    async with trio.open_nursery() as nursery:
        stage = Stage(servers, nursery)
        # only p0 reached its share; p1 and p2 join the round when asked, with what they have
        await stage.averagers["p0"].maybe_start(nursery, share=8)
        await settle(stage, 1)
    reference.step(lambda flat, n: (flat, n))
    for s in servers:
        assert s.statistics().steps == 1 and s.pending_samples == 0
        assert torch.allclose(flat_params(s), flat_params(reference), atol=1e-6)
        assert torch.equal(flat_params(s), flat_params(servers[0]))
    assert all(a.contributors[-1] == 3 for a in stage.averagers.values())


async def test_rounds_follow_each_other_and_a_dead_server_is_left_out():
    servers = [server() for _ in range(3)]
    async with trio.open_nursery() as nursery:
        stage = Stage(servers, nursery)
        for round_ in (1, 2, 3):
            if round_ == 3:
                stage.dead.add("p2")
            for i, s in enumerate(servers):
                feed_random(s, 4, seed=10 * round_ + i)
            starter = stage.averagers["p1" if round_ % 2 else "p0"]
            await starter.maybe_start(nursery, share=4)
            await settle(stage, round_)
    a, b, dead = servers
    assert a.statistics().steps == b.statistics().steps == 3
    assert torch.equal(flat_params(a), flat_params(b))
    assert stage.averagers["p0"].contributors == [3, 3, 2]
    assert dead.statistics().steps == 2  # it never learned of round 3


async def test_a_server_below_its_share_does_not_start_a_round():
    s = server()
    feed_random(s, 4, seed=0)
    async with trio.open_nursery() as nursery:
        averager = StageAverager(s, me="p0", fetch=None, peers=list)  # type: ignore[arg-type]
        await averager.maybe_start(nursery, share=8)
        assert averager.taken == 0 and s.pending_samples == 4


async def test_a_late_call_after_the_service_stopped_starts_no_round_and_raises_nothing():
    # A call that finishes after its stage service stopped (killed, or moved) reaches the
    # averager with the service's nursery already closed: nothing to run the round in.
    s = server()
    feed_random(s, 8, seed=0)
    async with trio.open_nursery() as closed:
        pass
    averager = StageAverager(s, me="p0", fetch=None, peers=list)  # type: ignore[arg-type]
    await averager.maybe_start(closed, share=8)
    assert averager.taken == 1 and averager.completed == 0 and s.statistics().steps == 0


def test_a_movers_state_download_reproduces_its_donor():
    donor, mover = server(), server()
    with torch.no_grad():
        for p in mover.module.parameters():
            p.add_(1.0)  # the mover served another slice before: anything but the donor's weights
    for step in range(3):
        feed_random(donor, 8, seed=step)
        donor.step(lambda flat, n: (flat, n))
    flat, adam_step = export_state(donor)
    assert adam_step == 3
    import_state(mover, flat, adam_step)
    assert torch.equal(flat_params(mover), flat_params(donor))
    for s in (donor, mover):  # and they stay identical through the next step (Adam moments too)
        feed_random(s, 8, seed=99)
        s.step(lambda flat, n: (flat, n))
    assert torch.allclose(flat_params(mover), flat_params(donor), atol=1e-7)


class HostileStage(Stage):
    """p2 answers with whatever `forge(round)` returns: its own claim of samples and gradients."""

    def __init__(self, servers, nursery, forge) -> None:
        super().__init__(servers, nursery)
        self.forge = forge
        self.applied: dict[str, list[int]] = {n: [] for n in self.names}
        for name, s in zip(self.names, servers, strict=True):
            original = s.apply_average

            def record(total, samples, name=name, original=original):
                self.applied[name].append(samples)
                original(total, samples)

            s.apply_average = record
            self.averagers[name].max_samples = 16  # what the run's batch allows one server

    def _fetch_for(self, me: str):
        honest = super()._fetch_for(me)

        async def fetch(peer: str, round_: int):
            return self.forge(round_) if peer == "p2" else await honest(peer, round_)

        return fetch


async def test_a_claim_of_2_to_the_40_samples_counts_as_the_runs_batch_allows():
    servers = [server("sgd") for _ in range(3)]
    numel = sum(p.numel() for p in servers[0].module.parameters())
    g = torch.Generator().manual_seed(5)
    forged = torch.randn(numel, generator=g) * 0.01  # a plausible gradient sum
    for i, s in enumerate(servers[:2]):
        feed_random(s, 8, seed=i)
    async with trio.open_nursery() as nursery:
        stage = HostileStage(servers, nursery, lambda r: (forged, 2**40))
        stage.dead.add("p2")  # p2 itself never steps: only its forged answers exist
        await stage.averagers["p0"].maybe_start(nursery, share=8)
        await settle(stage, 1)
    assert stage.applied["p0"] == stage.applied["p1"] == [8 + 8 + 16]
    assert torch.equal(flat_params(servers[0]), flat_params(servers[1]))


async def test_a_contribution_far_beyond_the_median_norm_is_left_out_of_the_average():
    servers = [server("sgd") for _ in range(3)]
    numel = sum(p.numel() for p in servers[0].module.parameters())
    reference = [server("sgd") for _ in range(2)]
    for i in range(3):
        feed_random(servers[i], 8, seed=i)
    async with trio.open_nursery() as nursery:
        stage = HostileStage(servers, nursery, lambda r: (torch.full((numel,), 1e3), 8))
        stage.dead.add("p2")
        await stage.averagers["p0"].maybe_start(nursery, share=8)
        await settle(stage, 1)
    assert stage.applied["p0"] == [16] and stage.averagers["p0"].refused == 1
    for i in range(2):  # the same step as two servers that never heard of p2
        feed_random(reference[i], 8, seed=i)
    async with trio.open_nursery() as nursery:
        honest = Stage(reference, nursery)
        await honest.averagers["p0"].maybe_start(nursery, share=8)
        await settle(honest, 1)
    assert torch.equal(flat_params(servers[0]), flat_params(reference[0]))
