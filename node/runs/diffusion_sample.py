"""`peertrain sample`: images from a diffusion run's newest experts and router, on any node.

A member reads the run-wide RunState it already holds; any other node finds the run (run_lookup),
pulls a replica of its RunState from the members that told it of the run (kept, and only
refreshed for a few seconds the next time, so a run whose members stopped still samples from
the states fetched before), and reads the same thing: per group, the newest state its members
announce (swarm/diffusion/groups.py). States are fetched through the tensor service from the
members that hold them and kept by checksum (`MAX_CACHED`), so sampling again from unchanged
experts downloads nothing. Sampling and the image file run on a worker thread.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.protocol.errors import PeertrainError

from ..errors import ControlError
from ..services.node_services import NodeServices
from ..services.tensor_fetch import fetch_tensor
from .directory import matches
from .peer_addrs import reach
from .run_sync import SyncExchange
from .session import RunSession

if TYPE_CHECKING:
    from .run_lookup import RunFinder

MAX_CACHED = 16  # states kept by checksum (a dit-tiny state is about 2 MB)
MAX_REPLICAS = 8  # run states pulled before, kept to sample again without the run's members
REFRESH_S = 5.0  # how long a kept run state is brought up to date before sampling from it
MAX_SAMPLES = 1024
MAX_STEPS = 1000


class DiffusionSampler:
    """Serves `diffusion.sample` for any run, member or not."""

    def __init__(
        self, node: NodeServices, finder: RunFinder, sessions: dict[str, RunSession]
    ) -> None:
        self.node, self.finder, self.sessions = node, finder, sessions
        self._states: OrderedDict[bytes, Any] = OrderedDict()
        # run ID -> (its RunState, the peers that served it): a run whose members stopped
        # cost the whole lookup timeout (30 s), though the states sampled from were all here
        self._replicas: OrderedDict[str, tuple[RunState, set[str]]] = OrderedDict()
        self._limiter = trio.CapacityLimiter(1)  # one sampling job at a time

    async def sample(
        self, run: str, draw: dict[str, Any], *, timeout: float = 30.0, fresh: bool = False
    ) -> dict[str, Any]:
        """`draw` (n, steps, strategy, seed, out: node/api/control_methods.py bounds them) from
        run `run`'s newest states, found within `timeout`; `fresh`: fetch every state again."""
        _check_out(draw["out"])
        started = time.perf_counter()
        state, spec = await self._run_state(run, timeout)
        from peertrain.swarm.diffusion.groups import newest_states

        newest = newest_states(state, spec)
        missing = [g for g in spec.groups() if g not in newest]
        if missing:
            raise ControlError(
                f"no state of {', '.join(missing)} is announced yet (each group publishes one "
                "after its first round); try again later"
            )
        if fresh:  # as a node that never sampled (benchmarks/diffusion_sampling.py)
            self._states.clear()
        fetched = 0
        flats = {}
        for group, newest_state in newest.items():
            flats[group], got = await self._state(state, spec, group, newest_state)
            fetched += got
        ready = time.perf_counter()
        from peertrain.swarm.diffusion.sampling_job import draw_to_file

        written = await trio.to_thread.run_sync(
            lambda: draw_to_file(spec, flats, **draw), limiter=self._limiter
        )
        return {
            **written,
            "run_id": state.run_id,
            "groups": {
                g: {"round": s.round, "state": s.checksum.hex()[:16]} for g, s in newest.items()
            },
            "bytes_fetched": fetched,
            "fetch_seconds": ready - started,
            "seconds": time.perf_counter() - started,
        }

    async def _run_state(self, run: str, within: float):
        """(the run-wide RunState, the DiffusionSpec): ours if we are in the run, else a replica
        pulled from the members that told us of it."""
        from peertrain.swarm.diffusion.run_spec import DiffusionSpec

        for session in self.sessions.values():
            if matches(run, session.run_id, session.manifest.name):
                return session.state, _spec(DiffusionSpec, session.state)
        kept = self._kept(run)
        if kept is not None:  # sampled before: brought up to date if a member answers soon
            state, seeds = kept
            with trio.move_on_after(min(within, REFRESH_S)):
                await self._replicator(state, seeds).bootstrap(seeds)
            return state, _spec(DiffusionSpec, state)
        run_id, envelope, seeds = await self.finder.find_one(run, within=within)
        state = RunState(run_id)
        state.accept_manifest(envelope)
        spec = _spec(DiffusionSpec, state)
        if not await self._replicator(state, set(seeds)).bootstrap(seeds):
            raise ControlError(f"no member of run {run!r} answered for its state")
        self._replicas[run_id] = (state, set(seeds))
        while len(self._replicas) > MAX_REPLICAS:
            self._replicas.popitem(last=False)
        return state, spec

    def _kept(self, run: str) -> tuple[RunState, set[str]] | None:
        """The run state pulled for `run` before, if exactly one kept run is meant."""
        found = [
            kept
            for run_id, kept in self._replicas.items()
            if kept[0].manifest is not None and matches(run, run_id, kept[0].manifest.name)
        ]
        return found[0] if len(found) == 1 else None

    def _replicator(self, state: RunState, seeds: set[str]) -> Replicator:
        return Replicator(
            state=state,
            key_pair=self.node.identity.key_pair,
            pubsub=self.node.gossip,
            exchange=SyncExchange(self.node.host, state, seeds),
        )

    async def _state(self, state: RunState, spec, group: str, newest) -> tuple[Any, int]:
        """(group's state tensor, bytes downloaded for it): from the cache or its providers."""
        cached = self._states.get(newest.checksum)
        if cached is not None:
            self._states.move_to_end(newest.checksum)
            return cached, 0
        from peertrain.swarm.diffusion.group_member import state_numel

        numel = await trio.to_thread.run_sync(state_numel, spec, group)
        served = self.node.tensors.get(newest.checksum)  # our own group's state, if we serve it
        if served is not None:
            return await trio.to_thread.run_sync(_decoded, served), 0
        holders = await reach(self.node.host, state, newest.providers)
        try:
            download = await fetch_tensor(
                self.node.host,
                holders,
                newest.checksum,
                max_nbytes=4 * numel,
                scoreboard=self.node.scoreboard,
            )
            flat = await trio.to_thread.run_sync(download.finish)
        except PeertrainError as exc:
            raise ControlError(f"could not fetch {group}'s state: {exc}") from None
        self._states[newest.checksum] = flat
        while len(self._states) > MAX_CACHED:
            self._states.popitem(last=False)
        return flat, 4 * flat.numel()


def _decoded(prepared) -> Any:
    from peertrain.protocol.codecs import decode

    header = prepared.header
    return decode(
        prepared.payload,
        header.codec,
        dtype=header.dtype,
        shape=tuple(header.shape),
        block_size=header.block_size,
    ).clone()


def _spec(kind, state: RunState):
    manifest = state.manifest
    if manifest is None or manifest.mode != "diffusion":
        raise ControlError(f"run {state.run_id[:16]} is no diffusion run: it has no experts")
    return kind.from_bytes(manifest.spec)


def _check_out(out: str) -> None:
    if not out or not Path(out).is_absolute() or Path(out).suffix not in (".png", ".npz"):
        raise ControlError("out must be an absolute path ending in .png or .npz")
