"""Runs on this node: create one, find one among peers, and serve what others ask.

`run.create` (control API) writes a manifest signed by this node, whose hash is the run ID,
and starts a session. Runs are announced in the DHT (directory.py; `run.list` reads them).
`join --run QUERY` takes a run ID, an ID prefix of at least 8 hex characters, or a name: it
gathers every run that QUERY may mean (DHT entries and connected peers, over
`/peertrain/run/lookup/1.0.0`), verifies each manifest (signature and hash: a peer cannot hand
us a forged run), refuses a name that several runs carry, listing them, and checks the spec
against this node's own limits and data (spec_check.py) before a session builds anything.
Anti-entropy requests for any of our runs arrive on one protocol and are routed by run ID.
`run.leave` stops a session for good.
The control socket's parameters are checked in node/api/control_methods.py, which calls the
narrow methods here (`create`, `join`, `leave`, `sample_text`, `export`).
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from libp2p.peer.id import ID
from peertrain.crdt.manifest import RunManifest, open_manifest, sign_manifest
from peertrain.crdt.sync import SyncRequest
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.messages import ErrorCode, ErrorResponse
from peertrain.swarm.budget import RunBudget

from ..errors import ControlError, NodeError
from ..net.rpc import RpcServer, refuse
from ..services.node_services import NodeServices
from ..supervision import ServiceHealthStatus, Supervisor
from .certificate_file import save_certificate
from .diffusion_sample import DiffusionSampler
from .diffusion_session import save_partition
from .directory import RunDirectory, listing_of, matches
from .invites import check_certificate
from .lifecycle import SessionLifecycle, quarantine, quarantine_file
from .name_lookup import Candidate, ambiguous
from .new_spec import diffusion_spec, spec_bytes_of
from .run_export import export_run
from .run_lookup import RUN_LOOKUP, RunFinder, RunFound, RunLookup
from .run_sync import CRDT_SYNC
from .session import RunSession, import_off_the_loop, saved_manifests
from .spec_check import (
    check_spec,
    local_data,
    remember_data,
    trust_models,
    with_data_digest,
    with_hf_model,
)
from .status import ManyRunsStatus, RunStatus
from .training_choices import TrainingChoices

if TYPE_CHECKING:
    from .session import MemberFactory

log = logging.getLogger(__name__)

MAX_RUNS = 8
MAX_SAMPLE_TOKENS = 2000  # `run.sample` asks for more: it gets this many
# What reading and checking a spec imports (the swarm packages import torch): off the event loop,
# or a create or join leaves the daemon deaf for seconds (session.py says why that hurts)
SPEC_MODULES = ("peertrain.swarm.diloco.member.run_spec", "peertrain.swarm.pipeline.run_spec")


class RunManager:
    """The daemon's runs, at most `MAX_RUNS`. `join_at_start`: a run to join once serving (the
    `run` option), as `role_at_start` (`run_role`), with `data_at_start` (`run_data`) and
    `certificate_at_start` (`run_certificate`: invite runs).
    `budget`: what this node agrees to hold for a run (`max_params`, `max_memory`)."""

    def __init__(
        self,
        node: NodeServices,
        choices: TrainingChoices,
        *,
        join_at_start: str | None = None,
        role_at_start: str | None = None,
        data_at_start: str | None = None,
        certificate_at_start: str | None = None,
        budget: RunBudget | None = None,
        trusted_models: tuple[str, ...] = (),
    ) -> None:
        self.node, self.choices = node, choices
        self.trusted_models = set(trusted_models)  # import paths the local user chose
        self.join_at_start, self.role_at_start = join_at_start, role_at_start
        self.data_at_start, self.certificate_at_start = data_at_start, certificate_at_start
        self.budget = budget or RunBudget()
        self.directory = RunDirectory(
            node.dht, node.host, node.peer_id, lambda: [listing_of(s) for s in self._active()]
        )
        self.finder = RunFinder(node.dht, node.host, self.directory)
        self.directory.verified.fetch = self.finder.fetch  # `run list` verifies by lookups
        self.directory.verified.penalise = node.scoreboard.penalise
        self.sessions: dict[str, RunSession] = {}
        self.sampler = DiffusionSampler(node, self.finder, self.sessions)
        # set by a process that holds a user's model (node/api/diloco.py): it alone can take
        # part in `external:` runs
        self.member_factory: MemberFactory | None = None
        self.supervisor = Supervisor(max_failures=3, window=600.0, backoff_min=2.0)
        self._lifecycles: dict[str, SessionLifecycle] = {}  # run ID → its own; bounded as sessions
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
            nursery.start_soon(self.directory.run)
            if self.join_at_start:
                nursery.start_soon(self._join_configured, self.join_at_start)
            task_status.started(self)
            await trio.sleep_forever()

    def leave(self, name: str) -> RunSession:
        """Stop taking part in run `name` (any, when in one): its session stops, its lease runs
        out (the others count it gone within LEASE_MS), status drops it. Its folder stays:
        joining again resumes from its checkpoints."""
        session = self.session_named(name)
        lifecycle = self._lifecycles.pop(session.run_id, None)
        if lifecycle is not None:
            lifecycle.leave()
        self.sessions.pop(session.run_id, None)
        self.supervisor.forget(f"run {session.run_id[:16]}")
        log.info("left run %s (%s)", session.manifest.name, session.run_id[:16])
        return session

    def trust_model(self, model: Any) -> None:
        """A model import path the local user named on the control socket may be imported."""
        if isinstance(model, str) and model:
            self.trusted_models.add(model)

    def session_named(self, name: str) -> RunSession:
        """Our run that `name` means (any, when we are in one run and `name` is empty)."""
        found = [
            s
            for s in self.sessions.values()
            if not name or matches(name, s.run_id, s.manifest.name)
        ]
        if len(found) != 1:
            listed = ", ".join(s.manifest.name for s in self.sessions.values()) or "none"
            what = f"no run {name!r}" if not found else f"{len(found)} runs match {name!r}"
            raise ControlError(
                f"{what} on this node (its runs: {listed}); name one: its name or an ID prefix"
            )
        return found[0]

    async def sample_text(self, run: str, prompt: str, tokens: int) -> str:
        """Text from the model of our run `run` (a text run), `tokens` long."""
        session = self.session_named(run)
        try:
            return await session.sample(prompt, min(tokens, MAX_SAMPLE_TOKENS))
        except (TypeError, RuntimeError) as exc:
            raise ControlError(str(exc)) from None

    async def export(self, run: str, out: str, fmt: str = "safetensors") -> dict[str, Any]:
        """Our run `run`'s model, as its group holds it, written to the folder `out`."""
        return await export_run(self.session_named(run), out, fmt)

    async def create(
        self,
        *,
        name: str,
        mode: str,
        spec: dict[str, Any],
        role: dict[str, Any] | None = None,
        data: str | None = None,
        budget: RunBudget | None = None,
    ) -> RunSession:
        """A new run signed by this node. `data`: the user's file, named in the spec by digest."""
        if not name or len(name) > 64:
            raise ControlError("a run needs a name of 1-64 characters (--name)")
        if any(s.manifest.name == name for s in self.sessions.values()):
            raise ControlError(f"this node already takes part in a run named {name!r}")
        if data is not None:
            spec = with_data_digest(spec, data)
        await import_off_the_loop(SPEC_MODULES)
        trust_models(self.trusted_models)
        spec = with_hf_model(spec)
        artifact = None  # a diffusion run's partition, fitted here and named in its spec
        if mode == "diffusion":
            spec_bytes, artifact = await trio.to_thread.run_sync(diffusion_spec, spec)
        else:
            spec_bytes = spec_bytes_of(mode, spec)
        manifest = RunManifest(
            creator=self.node.peer_id,
            created_ms=int(time.time() * 1000),
            name=name,
            mode=mode,
            spec=spec_bytes,
        )
        envelope = sign_manifest(self.node.identity.key_pair, manifest)
        check_spec(manifest, budget=budget or self.budget, data=data, own_model=self._own_model)
        remember_data(self._run_directory(manifest.run_id), data)
        if artifact is not None:
            save_partition(self._run_directory(manifest.run_id), artifact)
        log.info("created run %s (%s)", name, manifest.run_id[:16])
        session = await self._start(manifest.run_id, envelope, seeds=set(), role=role)
        self.directory.changed()
        return session

    async def join(
        self,
        name: str,
        *,
        timeout: float = 30.0,
        role: dict[str, Any] | None = None,
        data: str | None = None,
        budget: RunBudget | None = None,
        certificate: str | None = None,
    ) -> RunSession:
        """Join the run `name` means: a run ID, an ID prefix (≥ 8 hex) or a name that exactly
        one run carries. Its spec is checked against `budget` and `data` before anything is
        built. `certificate`: the token `run invite` printed for us (invite runs)."""
        ours = [s for s in self.sessions.values() if matches(name, s.run_id, s.manifest.name)]
        if len(ours) == 1:
            self._keep_certificate(ours[0].run_id, certificate, ours[0])
            return ours[0]
        if len(ours) > 1:  # this node is in several runs of that name
            raise ambiguous(name, [Candidate.of(s.run_id, s.manifest) for s in ours])
        local = self._saved(name)
        if local is not None:  # we were in this run before: restart it, peers or not
            run_id, envelope = local
            data = data if data is not None else local_data(self._run_directory(run_id))
            seeds: set[str] = set()
        else:
            run_id, envelope, seeds = await self.finder.find_one(name, within=timeout)
        await import_off_the_loop(SPEC_MODULES)
        trust_models(self.trusted_models)
        check_spec(
            open_manifest(envelope, run_id),
            budget=budget or self.budget,
            data=data,
            own_model=self._own_model,
        )
        remember_data(self._run_directory(run_id), data)
        self._keep_certificate(run_id, certificate)
        session = await self._start(run_id, envelope, seeds=seeds, role=role)
        self.directory.changed()
        return session

    def _keep_certificate(
        self, run_id: str, token: str | None, session: RunSession | None = None
    ) -> None:
        """Check and keep our certificate for `run_id`; a running session carries it at once."""
        if token is None:
            return
        raw = check_certificate(token, run_id, self.node.peer_id)
        save_certificate(self._run_directory(run_id), raw)
        if session is not None:
            session.use_certificate(raw)

    @property
    def _own_model(self) -> bool:
        return self.member_factory is not None

    def _run_directory(self, run_id: str) -> Path:
        return self.node.home / "runs" / run_id

    def _saved(self, name: str) -> tuple[str, bytes] | None:
        for run_id, envelope in saved_manifests(self.node.home).items():
            try:
                manifest = open_manifest(envelope, run_id)
            except PeertrainError:
                log.warning("ignoring a corrupt saved manifest for run %s", run_id[:16])
                continue
            if matches(name, run_id, manifest.name):
                if quarantine_file(self.node.home, run_id).exists():
                    log.warning(
                        "run %s is quarantined after failing to start (%s); join it again "
                        "by hand to retry",
                        name,
                        quarantine_file(self.node.home, run_id),
                    )
                    return None
                return run_id, envelope
        return None

    async def _join_configured(self, name: str) -> None:
        role = self.role_at_start
        try:
            await self.join(
                name,
                timeout=120.0,
                role={"role": role} if role else None,
                data=self.data_at_start,
                certificate=self.certificate_at_start,
            )
        except NodeError as exc:
            log.error("%s", exc)
        except Exception as exc:  # noqa: BLE001 - a run that cannot start must not end the daemon
            log.error("run %s could not start: %s", name, exc, exc_info=exc)
            found = self._saved(name)
            if found is not None:  # a restart would only fail the same way: quarantine it
                quarantine(self.node.home, found[0], f"{type(exc).__name__}: {exc}")

    async def _start(
        self, run_id: str, envelope: bytes, *, seeds: set[str], role: dict[str, Any] | None = None
    ) -> RunSession:
        """Start a run's session under the supervisor; wait until it serves. A session that
        cannot start fails this call (the user hears why) and is not retried; one that fails
        later is restarted with backoff, and after a crash loop quarantined: it stays in status
        with its error, stops counting toward MAX_RUNS, and is not restarted from its saved
        manifest until the user joins it again."""
        if len(self._active()) >= MAX_RUNS:
            raise ControlError(f"this node already takes part in {MAX_RUNS} runs")
        if run_id in self.sessions and self.sessions[run_id].error is None:
            return self.sessions[run_id]
        assert self._nursery is not None
        quarantine_file(self.node.home, run_id).unlink(missing_ok=True)
        new_session = functools.partial(
            RunSession,
            self.node,
            self.choices,
            run_id=run_id,
            manifest_envelope=envelope,
            seeds=seeds,
            role=role,
            member_factory=self.member_factory,
        )
        lifecycle = SessionLifecycle(self.sessions, run_id, new_session, self.node.home)
        self._lifecycles[run_id] = lifecycle
        try:
            await self.supervisor.start(
                self._nursery,
                f"run {run_id[:16]}",
                lifecycle.run,
                critical=True,
                on_quarantine=lifecycle.quarantine,
            )
        except Exception:
            self.sessions.pop(run_id, None)  # the caller hears why; nothing is left running
            self._lifecycles.pop(run_id, None)
            self.supervisor.forget(f"run {run_id[:16]}")
            raise
        return self.sessions[run_id]

    def _active(self) -> list[RunSession]:
        return [s for s in self.sessions.values() if not s.quarantined]

    # -- what peers ask -------------------------------------------------------------------------

    async def _answer_lookup(self, peer: ID, req: RunLookup) -> RunFound | ErrorResponse:
        for session in self.sessions.values():
            if matches(req.name, session.run_id, session.manifest.name):
                return req.reply(
                    RunFound, run_id=session.run_id, manifest=session.state.manifest_envelope
                )
        return refuse(req, ErrorCode.NOT_FOUND, f"no run {req.name!r} here")

    async def _answer_sync(self, peer: ID, req: SyncRequest):
        session = self.sessions.get(req.run.partition("/")[0])  # a run or one of its groups
        replicator = session.replicator_for(req.run) if session is not None else None
        if replicator is None:
            return refuse(req, ErrorCode.NOT_FOUND, "not in that run")
        return replicator.handle_sync(peer.to_base58(), req)

    def services(self) -> list[ServiceHealthStatus]:
        return self.supervisor.status()

    def status(self) -> RunStatus | ManyRunsStatus | None:
        if not self.sessions:
            return None
        statuses = [s.status() for s in self.sessions.values()]
        return statuses[0] if len(statuses) == 1 else ManyRunsStatus(runs=statuses)
