"""The diffusion side of a run session: pick an expert group, then train it as a DiLoCo group.

Policy lives in swarm/diffusion/ (the spec, the partition artifact, which group needs us, the
group's member); this adapter hands it the node's services. The run-wide RunState says who is in
which group (roles) and each group's newest state; a group trains in its own namespace,
`<run id>/<group>` (its own RunState, update topic and rounds), so expert groups exchange
nothing with each other: what this member aggregated is counted by the sender's group. Torch
and swarm/diffusion are imported when a diffusion run starts, never at daemon start.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from libp2p.abc import IHost
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.swarm.checkpoint_files import write_atomic

from ..services.tensor_fetch import fetch_tensor
from .group_seed import seed_from_group
from .update_exchange import member_driver, open_member_exchange

if TYPE_CHECKING:
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec

    from .context import RunContext

log = logging.getLogger(__name__)

LEASE_MS = 30_000
MIRROR_EVERY = 1.0  # seconds between looks at the group's newest state
PARTITION_FILE = "partition.bin"
GROUP_FILE = "group"  # a restarted member goes back to its group (and its checkpoints)


def save_partition(directory: Path, artifact: bytes) -> None:
    """The creator's partition artifact, beside the run's manifest (members fit or fetch it)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(directory / PARTITION_FILE, artifact)


def group_run_id(run_id: str, group: str) -> str:
    return f"{run_id}/{group}"


class GroupExchange:
    """Anti-entropy partners of a group's RunState: connected peers of that group."""

    def __init__(self, host: IHost, state: RunState, peers_of_group) -> None:
        self.host, self.state, self.peers_of_group = host, state, peers_of_group

    def peers(self) -> list[str]:
        connected = {p.to_base58() for p in self.host.get_connected_peers()}
        return sorted(connected & (set(self.state.members()) | self.peers_of_group()))

    async def request(self, peer: str, req):
        from .run_sync import SyncExchange

        return await SyncExchange.request(self, peer, req)  # type: ignore[arg-type]


class DiffusionSession:
    def __init__(self, context: RunContext, *, group: str | None = None) -> None:
        from peertrain.swarm.diffusion.run_spec import DiffusionSpec

        self.context = context
        self.spec: DiffusionSpec = DiffusionSpec.from_bytes(context.manifest.spec)
        if group is not None:
            self.spec.group_index(group)  # ConfigError for a group the run does not have
        self.group = group
        self.phase = "starting"
        self.driver: Any = None
        self.group_replicator: Replicator | None = None
        self.updates_from: Counter[str] = Counter()  # updates aggregated, by the sender's group
        self.router_accuracy: float | None = None
        self.sample_grid: dict[str, Any] | None = None  # SampleGrid.as_status() of the newest
        self._diagnostics = trio.CapacityLimiter(1)  # router accuracy and grids: one at a time

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from peertrain.swarm.diffusion.groups import choose_group

        context = self.context
        async with trio.open_nursery() as nursery:
            await nursery.start(context.replicator.run)
            await context.replicator.bootstrap()
            task_status.started(self)
            self.group = self.group or self._saved_group()
            if self.group is None:  # by the sizes the spec names: no data needed to choose
                sizes = list(self.spec.cluster_sizes) or [1] * self.spec.experts
                self.group = choose_group(context.state, self.spec, sizes, context.node.peer_id)
            write_atomic(context.directory / GROUP_FILE, (self.group + "\n").encode())
            log.info("diffusion run %s: training %s", context.run_id[:12], self.group)
            nursery.start_soon(self._announce_loop)  # the next joiner sees our choice at once
            self.phase = "partition"
            partition = await self._partition()
            await self._train(partition)

    def _saved_group(self) -> str | None:
        path = self.context.directory / GROUP_FILE
        group = path.read_text().strip() if path.exists() else ""
        return group if group in self.spec.groups() else None

    # -- the partition --------------------------------------------------------------------------

    async def _partition(self):
        """The run's partition: ours from disk, fitted here, or fetched from a member; served."""
        from peertrain.swarm.diffusion.errors import PartitionCorrupt
        from peertrain.swarm.diffusion.run_partition import (
            fit_run_partition,
            open_partition,
            partition_tensor,
        )

        path = self.context.directory / PARTITION_FILE
        artifact = path.read_bytes() if path.exists() else None
        if artifact is None:
            artifact = await trio.to_thread.run_sync(fit_run_partition, self.spec)
        try:
            partition = await trio.to_thread.run_sync(open_partition, self.spec, artifact)
        except PartitionCorrupt as exc:
            log.info("fitted partition differs from the run's (%s): fetching it", exc)
            artifact = await self._fetch_partition()
            partition = await trio.to_thread.run_sync(open_partition, self.spec, artifact)
        write_atomic(path, artifact)
        prepared = await trio.to_thread.run_sync(partition_tensor, artifact)
        self.context.node.tensors.put(prepared, pin=True)
        return partition

    async def _fetch_partition(self) -> bytes:
        from peertrain.swarm.diffusion.run_partition import MAX_PARTITION_BYTES

        from .peer_addrs import reach

        node, state = self.context.node, self.context.state
        holders = await reach(node.host, state, set(state.members()) - {node.peer_id})
        download = await fetch_tensor(
            node.host,
            holders,
            bytes.fromhex(self.spec.partition),
            max_nbytes=MAX_PARTITION_BYTES,
            scoreboard=node.scoreboard,
        )
        return download.payload.numpy().tobytes()

    # -- the group ------------------------------------------------------------------------------

    def _group_replicator(self) -> Replicator:
        from peertrain.swarm.diffusion.groups import group_members

        context, node = self.context, self.context.node
        state = RunState(group_run_id(context.run_id, self.group))
        # a group's namespace carries the run's manifest: its creator and anchors attest states
        state.manifest, state.manifest_envelope = context.manifest, context.state.manifest_envelope
        return Replicator(
            state=state,
            key_pair=node.identity.key_pair,
            pubsub=node.gossip,
            exchange=GroupExchange(
                node.host, state, lambda: group_members(context.state, self.spec)[self.group]
            ),
            on_penalty=lambda p: node.scoreboard.penalise(p.peer, p.points, p.reason),
        )

    async def _train(self, partition) -> None:
        from peertrain.swarm.diffusion.group_member import build_group_member
        from peertrain.swarm.diffusion.run_partition import images_of

        context, node, me, group = (
            self.context,
            self.context.node,
            self.context.node.peer_id,
            self.group,
        )
        self.phase = "building"
        images = images_of(self.spec).images
        built = await trio.to_thread.run_sync(
            build_group_member, self.spec, group, me, images, partition.assignments
        )
        replicator = self.group_replicator = self._group_replicator()
        gstate, dspec = replicator.state, built.spec
        checkpoints = context.directory / "checkpoints" / group
        self.phase = "fetching the group's state"
        await seed_from_group(context, self.spec, group, checkpoints, checkpoint_tag=gstate.run_id)
        exchange_cm = open_member_exchange(node, gstate, built, dspec.min_members)
        async with exchange_cm as exchange, trio.open_nursery() as nursery:
            self.driver = member_driver(
                context,
                exchange,
                spec=dspec,
                built=built,
                replicator=replicator,
                checkpoints=checkpoints,
                keep=2,
                on_penalty=self._blame,
                on_round=self._on_round,
            )
            await nursery.start(replicator.run)
            await replicator.bootstrap()
            self.phase = "training"
            await nursery.start(self.driver.run)
            nursery.start_soon(self._mirror_loop)
            nursery.start_soon(self._sample_grid_loop)
            if group == "router":
                nursery.start_soon(self._router_accuracy_loop, images, partition)

    def _blame(self, peer: str, reason: str) -> None:
        from .run_sync import STATE_PENALTY

        board = self.context.node.scoreboard
        board.penalise(
            peer, STATE_PENALTY, f"run {self.context.run_id[:12]}/{self.group}: {reason}"
        )

    def _on_round(self, report) -> None:
        from peertrain.swarm.diffusion.groups import group_members

        members = group_members(self.context.state, self.spec)
        for sender in report.accepted:
            owner = next((g for g, peers in members.items() if sender in peers), None)
            self.updates_from[
                owner or ("self" if sender == self.context.node.peer_id else "?")
            ] += 1

    # -- the run-wide view ----------------------------------------------------------------------

    async def _announce_loop(self) -> None:
        while True:
            self._announce()
            await trio.sleep(LEASE_MS / 3000)

    def _announce(self) -> None:
        """Our record in the run-wide state: our group as the role, and where we stand in it
        (the report our group's driver keeps in its group's lease) for `run show`."""
        loss = self.driver.progress.loss if self.driver is not None else None
        report = self.driver.lease.report() if self.driver is not None else None
        self.context.replicator.writer.announce(
            role=self.group or "",
            addrs=self.context.node.addrs()[:8],
            lease_ms=LEASE_MS,
            loss=None if loss is None else float(loss),
            report=report,
        )

    async def _mirror_loop(self) -> None:
        """Our group's newest state, mirrored into the run-wide RunState for samplers."""
        mirrored: tuple[int, bytes] | None = None
        while True:
            await trio.sleep(MIRROR_EVERY)
            served = self._served()
            if served is not None and served != mirrored:
                writer = self.context.replicator.writer
                writer.provide_checkpoint(*served)
                writer.add_progress(self.spec.inner_steps * (served[0] - (mirrored or (0,))[0]))
                self._announce()
                mirrored = served

    def _served(self) -> tuple[int, bytes] | None:
        """(round, checksum) of the state we provide in our group for our current round."""
        me, round_ = self.context.node.peer_id, self.driver.member.round
        gstate = self.group_replicator.state
        for checksum, providers in gstate.checkpoints().get(round_, {}).items():
            if me in providers:
                return round_, checksum
        return None

    async def _router_accuracy_loop(self, images, partition) -> None:
        """The router's top-1 accuracy at t = 0.1 on (up to 512 of) the run's images, per round."""
        import torch
        from peertrain.swarm.diffusion.training import router_accuracy

        clusters = torch.from_numpy(partition.assignments)
        subset = torch.arange(min(512, len(images)))
        seen = -1
        while True:
            await trio.sleep(MIRROR_EVERY)
            if self.driver.member.round == seen:
                continue
            seen, objective = await self.driver.global_model()
            self.router_accuracy = await trio.to_thread.run_sync(
                functools.partial(
                    router_accuracy, objective.dit, images[subset], clusters[subset], t=0.1
                ),
                limiter=self._diagnostics,
            )

    async def _sample_grid_loop(self) -> None:
        """A sample grid from our group's θ_global when swarm/diffusion/sample_grid.py says so."""
        from peertrain.swarm.diffusion.sample_grid import grid_due, render_grid

        every, last = self.context.choices.sample_grid_every, None
        while True:
            await trio.sleep(MIRROR_EVERY)
            if not grid_due(self.driver.member.round, last, every, finished=self.driver.finished):
                continue
            last, objective = await self.driver.global_model()
            grid = await trio.to_thread.run_sync(
                render_grid, self.spec, {self.group: objective.dit}, last, limiter=self._diagnostics
            )
            if grid is None:
                return  # a router alone draws nothing, now or later
            self.sample_grid = grid.as_status()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        from peertrain.swarm.diffusion.groups import group_progress

        driver, progress = self.driver, self.driver.progress if self.driver else None
        gossip = driver.gossip if driver else None
        out: dict[str, Any] = {
            "group": self.group,
            "experts": self.spec.experts,
            "dataset": self.spec.dataset,
            "model": self.spec.model,
            "groups": group_progress(self.context.state, self.spec),
            "traffic": {
                "bytes_published": gossip.bytes_published if gossip else 0,
                "bytes_fetched": gossip.bytes_fetched if gossip else 0,
                "updates_from": dict(self.updates_from),
            },
            # as a DiLoCo run names them (the local-swarm table and churn accounting read them)
            "bytes_published": gossip.bytes_published if gossip else 0,
            "bytes_fetched": gossip.bytes_fetched if gossip else 0,
            "router_accuracy": self.router_accuracy,
            "sample_grid": self.sample_grid,  # {png: base64, round, caption} | None
            "round": progress.round if progress else 0,
            "phase": progress.phase if progress else self.phase,
            "loss": progress.loss if progress else None,
            "initial_loss": progress.initial_loss if progress else None,
            "finished": bool(driver and driver.finished),
            "state_checksum": progress.state_checksum if progress else "",
            # a DiLoCo run's counters, for /metrics and the dashboard alike (its tiles)
            "rounds_completed": progress.rounds_completed if progress else 0,
            "resyncs": progress.resyncs if progress else 0,
            "rejected_updates": progress.rejected_updates if progress else 0,
            "rejected_by_reason": dict(progress.rejected_by_reason) if progress else {},
        }
        return out

    def replicator_for(self, run: str) -> Replicator | None:
        if self.group_replicator is not None and self.group_replicator.state.run_id == run:
            return self.group_replicator
        return None
