"""The SWARM-pipeline side of a run session: replicated RunState, then a server or a trainer.

A node joins a swarm run with a role: `server` (the default; it serves the stage with the most
need, or `stage` if given) or `trainer`. The run's RunState replica comes first (bootstrapped
from the peer that told us of the run), because both roles decide from it: a server picks its
stage and its state donor, a trainer its wiring. The policy is swarm/pipeline/'s
(`StageService`, `TrainerLoop`); this adapter hands them the node's libp2p transport, its
RunState replica and writer, a folder for its stage checkpoints (`<run dir>/stages/<stage>`),
and adds what only a node does: the stream handler and the DHT stage key (discovery from
outside the run; decisions use RunState). Torch and the pipeline modules are imported here,
when a swarm run starts, never at daemon start (tests/node/test_lightweight_daemon.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from peertrain.dht import stage_key
from peertrain.protocol.errors import PeertrainError

if TYPE_CHECKING:
    from peertrain.swarm.pipeline.stage_service import StageService

    from .context import RunContext

log = logging.getLogger(__name__)

ROLES = ("server", "trainer")
DHT_EVERY = 10.0
SERVER_TIMEOUT = 20.0  # a stage server's calls to its stage's other servers (states are large)
TRAINER_TIMEOUT = 10.0


class PipelineSession:
    def __init__(
        self,
        context: RunContext,
        *,
        role: str = "server",
        speed: float = 1.0,
        stage: int | None = None,
    ) -> None:
        from peertrain.swarm.pipeline.run_spec import PipelineSpec

        if role not in ROLES:
            raise ValueError(f"a swarm run's role is one of {ROLES}, not {role!r}")
        self.context, self.role, self.speed, self.stage = context, role, speed, stage
        self.spec = PipelineSpec.from_bytes(context.manifest.spec)
        if stage is not None and not 0 <= stage < self.spec.stages:
            raise ValueError(f"stage must be in 0..{self.spec.stages - 1}")
        self.service: Any = None
        self.handler: Any = None  # a server's PipelineHandler

    def dropped(self) -> dict[str, int]:
        """Stage calls from non-members, refused before their tensors were read."""
        return {"stage_calls": self.handler.dropped_calls if self.handler is not None else 0}

    async def run(
        self, *, task_status: trio.TaskStatus[PipelineSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        context = self.context
        async with trio.open_nursery() as nursery:
            await nursery.start(context.replicator.run)
            await context.replicator.bootstrap()
            if self.role == "server":
                service = self._stage_service()
                await nursery.start(service.run)
                nursery.start_soon(self._dht_loop, service)
            else:
                service = self._trainer_loop()
                await nursery.start(service.run)
            self.service = service
            task_status.started(self)

    def _stage_service(self) -> StageService:
        """Our `StageService`, answering the pipeline protocol as soon as it exists (a peer
        may ask for a round or a state while we still download ours: `NotServing`)."""
        from peertrain.swarm.pipeline.checkpoint import StageCheckpoints
        from peertrain.swarm.pipeline.stage_service import StageService
        from peertrain.swarm.pipeline.wire import PIPELINE

        from .pipeline_transport import BAD_INPUT_PENALTY, NetworkStageTransport, PipelineHandler

        context, node = self.context, self.context.node
        transport = NetworkStageTransport(node.host, context.run_id, timeout=SERVER_TIMEOUT)
        service = StageService(
            self.spec,
            self._peer(),
            peers=transport,
            creator=context.manifest.creator,
            speed=self.speed,
            stage=self.stage,
            checkpoints=StageCheckpoints(
                context.directory / "stages", manifest_hash=context.run_id
            ),
            blame=lambda peer, why: node.scoreboard.penalise(
                peer, BAD_INPUT_PENALTY, f"pipeline: {why}"
            ),
        )
        me = node.peer_id
        handler = PipelineHandler(
            service,
            context.run_id,
            node.scoreboard,
            is_member=lambda peer: peer == me or context.state.is_live(peer),
        )
        node.host.set_stream_handler(str(PIPELINE), handler.on_stream)
        self.handler = handler
        return service

    def _trainer_loop(self) -> Any:
        from peertrain.swarm.pipeline.trainer_loop import TrainerLoop

        from .pipeline_transport import NetworkStageTransport

        context, node = self.context, self.context.node
        transport = NetworkStageTransport(node.host, context.run_id, timeout=TRAINER_TIMEOUT)
        return TrainerLoop(self.spec, self._peer(), transport=transport)

    def _peer(self) -> Any:
        """This node as a pipeline peer: its identity, RunState replica, writer, addresses."""
        from peertrain.swarm.pipeline.membership import PipelinePeer

        context = self.context
        return PipelinePeer(
            me=context.node.identity.peer_id.to_base58(),
            state=context.state,
            writer=context.replicator.writer,
            addrs=context.node.addrs,
        )

    async def _dht_loop(self, service: StageService) -> None:
        """The DHT stage key, for discovery from outside the run (decisions use RunState)."""
        dht = self.context.node.dht
        while True:
            with trio.move_on_after(DHT_EVERY):
                try:
                    await dht.put(
                        stage_key(self.context.run_id[:64], service.stage),
                        {"tput": round(service.throughput(), 3)},
                        ttl=6 * DHT_EVERY,
                    )
                except (PeertrainError, ValueError) as exc:
                    log.debug("dht stage announcement failed: %s", exc)
            await trio.sleep(DHT_EVERY)

    def status(self) -> dict[str, Any]:
        state = self.context.state
        live = state.members()
        from peertrain.swarm.pipeline.membership import servers

        entries = servers(state, self.spec.stages)
        sizes = [sum(1 for e in entries.values() if e.stage == s) for s in range(self.spec.stages)]
        out: dict[str, Any] = {
            "stages": self.spec.stages,
            "stage_sizes": sizes,
            "members": sorted(live),
            "spec": {
                "base_seconds": self.spec.base_seconds,
                "codec": self.spec.codec,
                "static_seconds": self.spec.static_seconds,
                "demand": [self.spec.demand(s) for s in range(self.spec.stages)],
            },
        }
        if self.service is not None:
            out.update(self.service.status())
        else:
            out.update(role=self.role, phase="starting")
        return out
