"""The SWARM-pipeline side of a run session: replicated RunState, then a server or a trainer.

A node joins a swarm run with a role: `server` (the default; it serves the stage with the most
need, or `stage` if given) or `trainer`. The run's RunState replica comes first (bootstrapped
from the peer that told us of the run), because both roles decide from it: a server picks its
stage and its state donor, a trainer its wiring. Torch and the pipeline modules are imported
here, when a swarm run starts, never at daemon start (tests/node/test_lightweight_daemon.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .context import RunContext

ROLES = ("server", "trainer")


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

    async def run(
        self, *, task_status: trio.TaskStatus[PipelineSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from .pipeline_server import PipelineServer
        from .pipeline_trainer import PipelineTrainerService

        context = self.context
        async with trio.open_nursery() as nursery:
            await nursery.start(context.replicator.run)
            await context.replicator.bootstrap()
            if self.role == "server":
                service: Any = PipelineServer(
                    context, self.spec, speed=self.speed, stage=self.stage
                )
            else:
                service = PipelineTrainerService(context, self.spec)
            await nursery.start(service.run)
            self.service = service
            task_status.started(self)

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
