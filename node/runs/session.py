"""One training run inside the daemon: replicated RunState, update gossip, and the DiLoCo driver.

The swarm and crdt layers know nothing of libp2p; a session adapts the node's services
(`NodeServices`) to their small interfaces: gossip topics, anti-entropy requests (`rpc`), and
content-addressed tensors (node/runs/update_exchange.py). What it starts gets a `RunContext`,
never the session or the daemon. Torch work happens in the driver's worker threads; here we
only wire.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio
from peertrain.crdt.manifest import RunManifest
from peertrain.crdt.replicator import Penalty, Replicator
from peertrain.crdt.runstate import RunState
from peertrain.swarm.checkpoint_files import write_atomic

from ..net.loaded_code import freeze_what_is_loaded
from ..services.node_services import NodeServices
from .certificate_file import load_certificate
from .context import RunContext
from .ranks import lend_ranks, return_ranks
from .revocation_file import keep_revocations
from .run_sync import STATE_PENALTY, SyncExchange
from .run_view import MAX_ROWS, RunView, run_view
from .spec_check import local_data
from .status import DiffusionRunStatus, DiLoCoRunStatus, RunStatus, SwarmRunStatus
from .training_choices import TrainingChoices
from .update_exchange import member_driver, open_member_exchange

if TYPE_CHECKING:
    from peertrain.swarm.diloco.member.build import BuiltMember
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

    # (spec, this node's peer ID) -> the member; called on a worker thread
    MemberFactory = Callable[[DiLoCoSpec, str], BuiltMember]

log = logging.getLogger(__name__)

# The training code imports torch: seconds of CPU. Imported on the event loop, it stalls the
# whole daemon meanwhile, and under load a joining node then loses pubsub hellos and times out
# handshakes with the very peers it joins. A worker thread leaves the loop running.
DILOCO_MODULES = (
    "peertrain.swarm.diloco.member.build",
    "peertrain.swarm.diloco.group.driver",
    "peertrain.swarm.exchange.gossip",
)


async def import_off_the_loop(modules: tuple[str, ...]) -> None:
    await trio.to_thread.run_sync(lambda: [importlib.import_module(name) for name in modules])
    freeze_what_is_loaded()  # torch and the training code, out of the collector's passes


class RunSession:
    """Everything this node does for one run. `await nursery.start(session.run)`."""

    def __init__(
        self,
        node: NodeServices,
        choices: TrainingChoices,
        *,
        run_id: str,
        manifest_envelope: bytes,
        seeds: set[str] = frozenset(),
        role: dict[str, Any] | None = None,
        member_factory: MemberFactory | None = None,
    ) -> None:
        # swarm runs: {"role": "server"|"trainer", "speed": …, "stage": …}
        self.role = dict(role or {})
        # runs of a user-supplied model (`external:`): builds the member around it
        self.member_factory = member_factory
        self.pipeline = None
        self.diffusion = None
        state = RunState(run_id)
        state.accept_manifest(manifest_envelope)
        keep_revocations(state, node.home / "runs" / run_id)  # invite runs: none forgotten
        self.seeds = set(seeds)
        replicator = Replicator(
            state=state,
            key_pair=node.identity.key_pair,
            pubsub=node.gossip,
            exchange=SyncExchange(node.host, state, self.seeds),
            on_penalty=self._penalise,
        )
        self.context = RunContext(
            node=node,
            choices=choices,
            run_id=run_id,
            manifest=state.manifest,
            state=state,
            replicator=replicator,
            directory=node.home / "runs" / run_id,
        )
        self.driver = None
        self.error: str | None = None  # the last failure, shown in status (runs[].error)
        self.restarts = 0  # times the supervisor started this run again after a failure
        self.quarantined = False  # failed in a loop: down until the user joins it again
        save_manifest(self.context.directory, manifest_envelope)

    @property
    def run_id(self) -> str:
        return self.context.run_id

    @property
    def manifest(self) -> RunManifest:
        return self.context.manifest

    @property
    def state(self) -> RunState:
        return self.context.state

    @property
    def replicator(self) -> Replicator:
        return self.context.replicator

    def _blame(self, peer: str, reason: str) -> None:
        self.context.node.scoreboard.penalise(
            peer, STATE_PENALTY, f"run {self.run_id[:12]}: {reason}"
        )

    def _penalise(self, penalty: Penalty) -> None:
        self.context.node.scoreboard.penalise(
            penalty.peer, penalty.points, f"run state: {penalty.reason}"
        )

    async def run(
        self, *, task_status: trio.TaskStatus[RunSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self.manifest.mode == "swarm":
            await self._run_pipeline(task_status)
        elif self.manifest.mode == "diloco":
            await self._run_diloco(task_status)
        elif self.manifest.mode == "diffusion":
            await self._run_diffusion(task_status)
        else:
            raise NotImplementedError(f"mode {self.manifest.mode!r} is not served by this node yet")

    async def _run_diloco(self, task_status: trio.TaskStatus[RunSession]) -> None:
        await import_off_the_loop(DILOCO_MODULES)
        from peertrain.swarm.diloco.member.build import build_member
        from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
        from peertrain.swarm.models.external import is_external

        context, node, choices = self.context, self.context.node, self.context.choices
        spec = DiLoCoSpec.from_bytes(self.manifest.spec)
        me = node.peer_id
        data = local_data(context.directory)  # the user's file, checked against the spec's digest
        intra = None
        if is_external(spec.model) and self.member_factory is not None:
            factory = self.member_factory
        else:
            intra = await lend_ranks(choices.ranks, self.run_id, self.manifest.spec, data)
            factory = functools.partial(
                build_member,
                data=data,
                device=choices.device,
                precision=choices.precision,
                intra=intra,
            )
        built = None
        try:
            built = await trio.to_thread.run_sync(factory, spec, me)
            await self._drive_diloco(spec, built, task_status)
        finally:
            await return_ranks(choices.ranks, self.run_id, intra, built and built.member.inner)

    async def _drive_diloco(self, spec, built, task_status: trio.TaskStatus[RunSession]) -> None:
        context, node = self.context, self.context.node
        update_exchange = open_member_exchange(node, context.state, built, spec.min_members)
        async with update_exchange as exchange, trio.open_nursery() as nursery:
            self.driver = member_driver(
                context,
                exchange,
                spec=spec,
                built=built,
                replicator=context.replicator,
                checkpoints=context.directory / "checkpoints",
                keep=3,
                on_penalty=self._blame,
                certificate=load_certificate(context.directory),  # invite runs: `run invite`'s
            )
            await nursery.start(context.replicator.run)
            # joiners need the state; a restarted creator needs its own old slots back too
            await context.replicator.bootstrap()
            await nursery.start(self.driver.run)
            if (
                context.choices.attack == "announce-flood"
            ):  # a hostile member (swarm local --hostile)
                from .announce_flood import announce_flood

                member, nbytes = self.driver.member, exchange.gossip.expected_nbytes
                nursery.start_soon(
                    announce_flood, node.gossip, self.run_id, lambda: member.round, nbytes
                )
            task_status.started(self)

    async def _run_pipeline(self, task_status: trio.TaskStatus[RunSession]) -> None:
        # started at once: importing torch and fetching a stage's state may take longer than a
        # control request may wait; `status` says "starting" meanwhile
        task_status.started(self)
        await import_off_the_loop(("peertrain.node.runs.pipeline_session",))
        from .pipeline_session import PipelineSession

        pipeline = await trio.to_thread.run_sync(lambda: PipelineSession(self.context, **self.role))
        self.pipeline = pipeline
        await pipeline.run()

    async def _run_diffusion(self, task_status: trio.TaskStatus[RunSession]) -> None:
        # started at once, as a pipeline: the partition and torch may take longer than a
        # control request may wait; `status` says "starting" meanwhile
        task_status.started(self)
        await import_off_the_loop(("peertrain.node.runs.diffusion_session", *DILOCO_MODULES))
        from .diffusion_session import DiffusionSession

        self.diffusion = DiffusionSession(self.context, group=self.role.get("group"))
        await self.diffusion.run()

    def replicator_for(self, run: str) -> Replicator | None:
        """The replicator of `run`: this run's, or (diffusion) our expert group's."""
        if run == self.run_id:
            return self.replicator
        return self.diffusion.replicator_for(run) if self.diffusion is not None else None

    def use_certificate(self, raw: bytes) -> None:
        """A certificate given while the run is on: our next lease announcement carries it."""
        if self.driver is not None:
            self.driver.admission.add_certificate(raw)
            self.driver.certificate = raw

    async def sample(self, prompt: str, max_new_tokens: int) -> str:
        if self.driver is None:
            raise RuntimeError("the run is still starting")
        return await self.driver.sample(prompt, max_new_tokens)

    def status(self) -> RunStatus:
        if self.manifest.mode == "swarm":
            pipeline = self.pipeline.status() if self.pipeline is not None else {}
            return cast(SwarmRunStatus, {**self._common(), **self.role, **pipeline})
        if self.manifest.mode == "diffusion":
            live = sorted(p for p in self.state.members() if self.state.is_live(p))
            diffusion = self.diffusion.status() if self.diffusion is not None else {}
            return cast(DiffusionRunStatus, {**self._common(members=live), **diffusion})
        return self._diloco_status()

    def view(self, limit: int = MAX_ROWS) -> RunView:
        """The run-wide view (run_view.py): every live member's own report, ours first among
        equals; the ETA at our own pace (wall seconds per round we completed)."""
        driver = self.driver
        progress = driver.progress if driver is not None else None
        pace = None
        if progress is not None and progress.rounds_completed:
            pace = progress.wall_seconds / progress.rounds_completed
        return run_view(
            self.state,
            me=self.context.node.peer_id,
            rounds=driver.spec.rounds if driver is not None else None,
            seconds_per_round=pace,
            limit=limit,
        )

    def _common(
        self,
        *,
        members: list[str] | None = None,
        round_: int = 0,
        phase: str = "starting",
        loss: float | None = None,
    ) -> RunStatus:
        return RunStatus(
            name=self.manifest.name,
            run_id=self.run_id,
            mode=self.manifest.mode,
            creator=self.manifest.creator,
            members=members or [],
            round=round_,
            phase=phase,
            loss=loss,
            error=self.error,
            dropped=self._dropped(),
        )

    def _dropped(self) -> dict[str, int]:
        """Non-members' traffic dropped before it was stored, forwarded or downloaded."""
        dropped = {"deltas": self.replicator.intake.counts.non_members}
        if self.driver is not None:
            dropped.update(self.driver.gossip.dropped)
        if self.pipeline is not None:
            dropped.update(self.pipeline.dropped())
        return dropped

    def _diloco_status(self) -> DiLoCoRunStatus:
        driver, progress = self.driver, self.driver.progress if self.driver else None
        inner = driver.member.inner if driver else None
        live = [p for p in self.state.members() if self.state.is_live(p)]
        common = self._common(
            members=sorted(live),
            round_=progress.round if progress else 0,
            phase=progress.phase if progress else "starting",
            loss=progress.loss if progress else None,
        )
        return DiLoCoRunStatus(
            **common,
            initial_loss=progress.initial_loss if progress else None,
            rounds_completed=progress.rounds_completed if progress else 0,
            state_checksum=progress.state_checksum if progress else "",
            resyncs=progress.resyncs if progress else 0,
            rounds_alone=progress.rounds_alone if progress else 0,
            checkpoint_failures=progress.checkpoint_failures if progress else 0,
            checkpoint_error=progress.checkpoint_error if progress else "",
            unreliable_anchors=driver.trust.unreliable_status() if driver else {},
            state_downloads=progress.state_downloads if progress else 0,
            state_donors=list(progress.state_donors) if progress else [],
            rejected_updates=progress.rejected_updates if progress else 0,
            rejected_by_reason=dict(progress.rejected_by_reason) if progress else {},
            bytes_published=driver.gossip.bytes_published if driver else 0,
            bytes_fetched=driver.gossip.bytes_fetched if driver else 0,
            finished=bool(driver and driver.finished),
            params=driver.member.layout.numel if driver else 0,
            inner_steps=driver.spec.inner_steps if driver else 0,
            model=driver.spec.model if driver else "",
            device=str(getattr(inner, "device", "")),
            ranks=getattr(getattr(inner, "node", None), "world", 1),
            progress=driver.progress_status() if driver else None,
            streaming=driver.streaming_status() if hasattr(driver, "streaming_status") else None,
            view=self.view(),
        )


def save_manifest(directory: Path, envelope: bytes) -> None:
    """Keep the signed manifest, so this node can restart the run even if no peer is up."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / "manifest.envelope"
    if not path.exists():
        write_atomic(path, envelope)


def saved_manifests(home: Path) -> dict[str, bytes]:
    """run ID → signed manifest envelope, for every run this home has taken part in."""
    out = {}
    for path in sorted((home / "runs").glob("*/manifest.envelope")):
        out[path.parent.name] = path.read_bytes()
    return out
