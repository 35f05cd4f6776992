"""Runs on this node: create one, find one by name among peers, and serve what others ask.

`run.create` (control API) writes a manifest signed by this node, whose hash is the run ID,
and starts a session. `join --run NAME` asks connected peers for the run by name
(`/peertrain/run/lookup/1.0.0`), verifies the manifest it gets (signature and hash: a peer
cannot hand us a forged run), and starts a session seeded with that peer for anti-entropy.
Anti-entropy requests for any of our runs arrive on one protocol and are routed by run ID.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

import trio
from libp2p.peer.id import ID
from peertrain.crdt.manifest import RunManifest, open_manifest, sign_manifest
from peertrain.crdt.sync import SyncRequest
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import ErrorCode, ErrorResponse, Request, Response, message
from peertrain.protocol.schema import MaxLen

from ..errors import ControlError, NodeError
from ..net.rpc import RpcServer, refuse, request
from ..params import param
from ..services.node_services import NodeServices
from .session import CRDT_SYNC, RunSession, saved_manifests
from .status import ManyRunsStatus, RunStatus

log = logging.getLogger(__name__)

RUN_LOOKUP = protocol_id("run/lookup", "1.0.0")
MAX_RUNS = 8


@message("node/run-lookup", max_size=512)
class RunLookup(Request):
    name: Annotated[str, MaxLen(128)]  # a run name, or a run ID


@message("node/run-found", max_size=200 * 1024)
class RunFound(Response):
    run_id: Annotated[str, MaxLen(128)]
    manifest: Annotated[bytes, MaxLen(160 * 1024)]


class RunManager:
    """The daemon's runs, at most `MAX_RUNS`. `join_at_start`: a run to join once serving (the
    `run` option), as `role_at_start` (`run_role`)."""

    def __init__(
        self,
        node: NodeServices,
        *,
        join_at_start: str | None = None,
        role_at_start: str | None = None,
    ) -> None:
        self.node = node
        self.join_at_start, self.role_at_start = join_at_start, role_at_start
        self.sessions: dict[str, RunSession] = {}
        self._nursery: trio.Nursery | None = None

    async def run(
        self, *, task_status: trio.TaskStatus[RunManager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        host, board = self.node.host, self.node.scoreboard
        RpcServer(host, RUN_LOOKUP, RunLookup, self._answer_lookup, scoreboard=board).register()
        RpcServer(
            host, CRDT_SYNC, SyncRequest, self._answer_sync, scoreboard=board, max_per_peer=8
        ).register()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.join_at_start:
                nursery.start_soon(self._join_configured, self.join_at_start)
            task_status.started(self)
            await trio.sleep_forever()

    # -- control API ----------------------------------------------------------------------------

    def control_methods(self) -> dict[str, Any]:
        async def create(params: dict[str, Any]) -> dict[str, Any]:
            session = await self.create(
                name=param(params, "name", str, ""),
                mode=param(params, "mode", str, "") or "diloco",
                spec=param(params, "spec", dict, {}),
                role=_role(params),
            )
            return {"run_id": session.run_id, "name": session.manifest.name}

        async def join(params: dict[str, Any]) -> dict[str, Any]:
            session = await self.join(
                param(params, "name", str, ""),
                timeout=param(params, "timeout", float, 30.0),
                role=_role(params),
            )
            return {"run_id": session.run_id, "name": session.manifest.name}

        async def sample(params: dict[str, Any]) -> dict[str, Any]:
            if not self.sessions:
                raise ControlError("this node takes part in no run")
            session = next(iter(self.sessions.values()))
            try:
                text = await session.sample(
                    param(params, "prompt", str, ""), min(param(params, "tokens", int, 160), 2000)
                )
            except (TypeError, RuntimeError) as exc:
                raise ControlError(str(exc)) from None
            return {"text": text}

        return {"run.create": create, "run.join": join, "run.sample": sample}

    async def create(
        self, *, name: str, mode: str, spec: dict[str, Any], role: dict[str, Any] | None = None
    ) -> RunSession:
        if not name or len(name) > 64:
            raise ControlError("a run needs a name of 1-64 characters (--name)")
        if any(s.manifest.name == name for s in self.sessions.values()):
            raise ControlError(f"this node already takes part in a run named {name!r}")
        spec_bytes = _spec_bytes(mode, spec)
        manifest = RunManifest(
            creator=self.node.peer_id,
            created_ms=int(time.time() * 1000),
            name=name,
            mode=mode,
            spec=spec_bytes,
        )
        envelope = sign_manifest(self.node.identity.key_pair, manifest)
        log.info("created run %s (%s)", name, manifest.run_id[:16])
        return await self._start(manifest.run_id, envelope, seeds=set(), role=role)

    async def join(
        self, name: str, *, timeout: float = 30.0, role: dict[str, Any] | None = None
    ) -> RunSession:
        for session in self.sessions.values():
            if name in (session.manifest.name, session.run_id):
                return session
        local = self._saved(name)
        if local is not None:  # we were in this run before: restart it, peers or not
            run_id, envelope = local
            return await self._start(run_id, envelope, seeds=set(), role=role)
        with trio.move_on_after(timeout):
            while True:
                found = await self._lookup(name)
                if found is not None:
                    peer, reply = found
                    return await self._start(reply.run_id, reply.manifest, seeds={peer}, role=role)
                await trio.sleep(0.5)
        raise ControlError(f"no connected peer knows a run named {name!r} (after {timeout:.0f} s)")

    def _saved(self, name: str) -> tuple[str, bytes] | None:
        for run_id, envelope in saved_manifests(self.node.home).items():
            try:
                manifest = open_manifest(envelope, run_id)
            except PeertrainError:
                log.warning("ignoring a corrupt saved manifest for run %s", run_id[:16])
                continue
            if name in (manifest.name, run_id):
                return run_id, envelope
        return None

    async def _join_configured(self, name: str) -> None:
        role = self.role_at_start
        try:
            await self.join(name, timeout=120.0, role={"role": role} if role else None)
        except NodeError as exc:
            log.error("%s", exc)

    async def _lookup(self, name: str) -> tuple[str, RunFound] | None:
        for peer in self.node.host.get_connected_peers():
            try:
                reply = await request(
                    self.node.host, peer, RUN_LOOKUP, RunLookup(name=name), RunFound, timeout=5.0
                )
                open_manifest(reply.manifest, reply.run_id)  # forged or mismatched → ProtocolError
            except (PeertrainError, trio.TooSlowError) as exc:
                # a peer that hangs up mid-answer (rpc raises StreamEnded), does not know the
                # run, forges it or is too slow: ask the next one
                log.debug("run lookup at %s: %r", peer, exc)
                continue
            return peer.to_base58(), reply
        return None

    async def _start(
        self, run_id: str, envelope: bytes, *, seeds: set[str], role: dict[str, Any] | None = None
    ) -> RunSession:
        if len(self.sessions) >= MAX_RUNS:
            raise ControlError(f"this node already takes part in {MAX_RUNS} runs")
        assert self._nursery is not None
        session = RunSession(
            self.node, run_id=run_id, manifest_envelope=envelope, seeds=seeds, role=role
        )
        self.sessions[run_id] = session
        await self._nursery.start(session.run)
        return session

    # -- what peers ask -------------------------------------------------------------------------

    async def _answer_lookup(self, peer: ID, req: RunLookup) -> RunFound | ErrorResponse:
        for session in self.sessions.values():
            if req.name in (session.manifest.name, session.run_id):
                return req.reply(
                    RunFound, run_id=session.run_id, manifest=session.state.manifest_envelope
                )
        return refuse(req, ErrorCode.NOT_FOUND, f"no run {req.name!r} here")

    async def _answer_sync(self, peer: ID, req: SyncRequest):
        session = self.sessions.get(req.run)
        if session is None:
            return refuse(req, ErrorCode.NOT_FOUND, "not in that run")
        return session.replicator.handle_sync(peer.to_base58(), req)

    def status(self) -> RunStatus | ManyRunsStatus | None:
        if not self.sessions:
            return None
        statuses = [s.status() for s in self.sessions.values()]
        return statuses[0] if len(statuses) == 1 else ManyRunsStatus(runs=statuses)


def _role(params: dict[str, Any]) -> dict[str, Any] | None:
    """A swarm run's role from control parameters: {"role", "speed", "stage"} (all optional)."""
    out: dict[str, Any] = {}
    try:
        if params.get("role"):
            out["role"] = str(params["role"])
            if out["role"] not in ("server", "trainer"):
                raise ValueError(f"role must be server or trainer, not {out['role']!r}")
        if params.get("speed") is not None:
            out["speed"] = float(params["speed"])
            if not 0 < out["speed"] < 1e6:
                raise ValueError("speed must be positive")
        if params.get("stage") is not None:
            out["stage"] = int(params["stage"])
    except (TypeError, ValueError) as exc:
        raise ControlError(f"invalid role settings: {exc}") from None
    return out or None


def _spec_bytes(mode: str, spec: dict[str, Any]) -> bytes:
    if mode not in ("diloco", "swarm"):
        raise ControlError(f"unknown mode {mode!r}; this version trains `diloco` and `swarm` runs")
    from peertrain.swarm.diloco.run_spec import DiLoCoSpec
    from peertrain.swarm.models.config import ConfigError
    from peertrain.swarm.pipeline.run_spec import PipelineSpec

    try:
        if mode == "swarm":
            return PipelineSpec.from_settings(spec).to_bytes()
        return DiLoCoSpec(**spec).to_bytes()
    except (ConfigError, TypeError, ValueError) as exc:
        raise ControlError(f"invalid run settings: {exc}") from None
