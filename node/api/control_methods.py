"""Every method of the control socket: what it takes (its schema) and what it calls.

One table, `METHODS`: a method's `Schema` (control_schema.py) checks its params, then its call
reaches one narrow method of the daemon, its runs (node/runs/) or its services
(node/services/). Nothing below this module reads a control request, so a method's parameters
are said here once, and a wrong one is answered in one line naming it before anything runs.

    status                                                   → the daemon's status
    run.create  {name, mode, spec, data, role…, budget…}     → {run_id, name}
    run.join    {name, timeout, model, certificate, data, role…, budget…} → {run_id, name}
    run.list    {timeout}                       → {runs, unverified, unchecked}
    run.leave   {run}   run.export {run, out, format}   run.sample {run, prompt, tokens}
    run.show    {run}                                        → the run-wide view (runs/run_view.py)
    run.invite  {run, peer, role, expires}   run.revoke {run, peer}
    diffusion.sample {run, n, steps, strategy, seed, out, fresh, timeout}
    resolve_peer {peer, timeout}   debug.offer {mib}   debug.fetch {peer, checksum, timeout}

role…: `role` (server or trainer), `speed`, `stage` (swarm runs), `group` (diffusion runs);
budget…: `max_params`, `max_memory` (this node's own limits for the run; 0: half the RAM).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from libp2p.abc import IHost

from ..net.identity import Identity
from ..runs.diffusion_sample import MAX_SAMPLES, MAX_STEPS
from ..runs.invites import DEFAULT_EXPIRES, invite, revoke
from ..runs.manager import RunManager
from ..runs.session import RunSession
from ..services import payload_check
from ..services.dht import DhtService
from ..services.tensors import TensorStore
from .control import Handler
from .control_schema import Field, Schema

MAX_WAIT = 3600.0  # the longest `timeout` a call may ask of the daemon (s)

ROLE = (
    Field("role", str, None, choices=("server", "trainer")),
    Field("speed", float, None, low=1e-6, high=1e6),
    Field("stage", int, None, low=0, high=1023),
    Field("group", str, None),
)
BUDGET = (Field("max_params", int, None, low=1), Field("max_memory", int, None, low=0))
ENTER = (*ROLE, *BUDGET, Field("data", str, None))  # what run.create and run.join share


class ControlledNode(Protocol):
    """What of the daemon the control methods reach (node/daemon.py's `Daemon` has it)."""

    runs: RunManager
    dht: DhtService
    identity: Identity
    host: IHost
    tensor_store: TensorStore

    def status(self) -> Any: ...


@dataclass(frozen=True)
class ControlMethod:
    """A method's parameters and what it does with them, checked."""

    schema: Schema
    call: Callable[[ControlledNode, dict[str, Any]], Awaitable[Any]]


def control_methods(node: ControlledNode) -> dict[str, Handler]:
    """The control socket's handlers for `node` (a daemon): each checks its params, then calls."""
    return {name: _bound(name, method, node) for name, method in METHODS.items()}


def _bound(name: str, method: ControlMethod, node: ControlledNode) -> Handler:
    async def handle(params: dict[str, Any]) -> Any:
        return await method.call(node, method.schema.check(name, params))

    return handle


async def _status(node: ControlledNode, _: dict[str, Any]) -> Any:
    return node.status()


async def _run_create(node: ControlledNode, p: dict[str, Any]) -> dict[str, str]:
    runs = node.runs
    runs.trust_model(p["spec"].get("model"))  # the local user named it (run create --model)
    session = await runs.create(
        name=p["name"],
        mode=p["mode"] or "diloco",
        spec=p["spec"],
        role=_role(p),
        data=p["data"],
        budget=_budget(node, p),
    )
    return _entered(session)


async def _run_join(node: ControlledNode, p: dict[str, Any]) -> dict[str, str]:
    node.runs.trust_model(p["model"])  # run join --model
    session = await node.runs.join(
        p["name"],
        timeout=p["timeout"],
        role=_role(p),
        data=p["data"],
        budget=_budget(node, p),
        certificate=p["certificate"],
    )
    return _entered(session)


async def _run_list(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    return await node.runs.directory.survey(within=p["timeout"])


async def _run_leave(node: ControlledNode, p: dict[str, Any]) -> dict[str, str]:
    return _entered(node.runs.leave(p["run"]))


async def _run_show(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    session = node.runs.session_named(p["run"])
    head = {"run_id": session.run_id, "name": session.manifest.name, "mode": session.manifest.mode}
    return {**head, **session.view(limit=session.state.limits.max_owners)}


async def _run_export(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    return await node.runs.export(p["run"], p["out"], p["format"])


async def _run_sample(node: ControlledNode, p: dict[str, Any]) -> dict[str, str]:
    return {"text": await node.runs.sample_text(p["run"], p["prompt"], p["tokens"])}


async def _run_invite(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    session, identity = node.runs.session_named(p["run"]), node.identity
    me = identity.peer_id.to_base58()
    return invite(
        session, me, identity.key_pair, peer=p["peer"], role=p["role"], expires=p["expires"]
    )


async def _run_revoke(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    me = node.identity.peer_id.to_base58()
    return revoke(node.runs.session_named(p["run"]), me, p["peer"])


async def _diffusion_sample(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    draw = {k: p[k] for k in ("n", "steps", "strategy", "seed", "out")}
    return await node.runs.sampler.sample(p["run"], draw, timeout=p["timeout"], fresh=p["fresh"])


async def _resolve_peer(node: ControlledNode, p: dict[str, Any]) -> Any:
    return await node.dht.resolve_peer(p["peer"], timeout=p["timeout"])


async def _debug_offer(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    return await payload_check.offer(node.tensor_store, p["mib"])


async def _debug_fetch(node: ControlledNode, p: dict[str, Any]) -> dict[str, Any]:
    return await payload_check.fetch(
        node.host, node.dht, p["peer"], p["checksum"], timeout=p["timeout"]
    )


def _entered(session: RunSession) -> dict[str, str]:
    return {"run_id": session.run_id, "name": session.manifest.name}


def _role(p: dict[str, Any]) -> dict[str, Any] | None:
    """A run's role from checked params: swarm {"role", "speed", "stage"}, diffusion {"group"}."""
    role = {k: p[k] for k in ("role", "speed", "stage", "group") if p[k] not in (None, "")}
    return role or None


def _budget(node: ControlledNode, p: dict[str, Any]):
    """This node's budget, with what the call asks for instead."""
    asked = {k: p[k] for k in ("max_params", "max_memory") if p[k] is not None}
    return dataclasses.replace(node.runs.budget, **asked)


def _timeout(default: float) -> Field:
    return Field("timeout", float, default, low=0, high=MAX_WAIT)


METHODS: dict[str, ControlMethod] = {
    "status": ControlMethod(Schema(), _status),
    "run.create": ControlMethod(
        Schema(Field("name", str, ""), Field("mode", str, ""), Field("spec", dict, {}), *ENTER),
        _run_create,
    ),
    "run.join": ControlMethod(
        Schema(
            Field("name", str, ""),
            _timeout(30.0),
            Field("model", str, None),
            Field("certificate", str, None),
            *ENTER,
        ),
        _run_join,
    ),
    "run.list": ControlMethod(Schema(_timeout(8.0)), _run_list),
    "run.leave": ControlMethod(Schema(Field("run", str, "")), _run_leave),
    "run.show": ControlMethod(Schema(Field("run", str, "")), _run_show),
    "run.export": ControlMethod(
        Schema(Field("run", str, ""), Field("out", str, ""), Field("format", str, "safetensors")),
        _run_export,
    ),
    "run.sample": ControlMethod(
        Schema(Field("run", str, ""), Field("prompt", str, ""), Field("tokens", int, 160, low=1)),
        _run_sample,
    ),
    "run.invite": ControlMethod(
        Schema(
            Field("run", str, ""),
            Field("peer", str),
            Field("role", str, "member"),
            Field("expires", str, DEFAULT_EXPIRES),
        ),
        _run_invite,
    ),
    "run.revoke": ControlMethod(Schema(Field("run", str, ""), Field("peer", str)), _run_revoke),
    "diffusion.sample": ControlMethod(
        Schema(
            Field("run", str, ""),
            Field("out", str, ""),
            Field("n", int, 64, low=1, high=MAX_SAMPLES),
            Field("steps", int, 50, low=1, high=MAX_STEPS),
            Field("strategy", str, "top1"),
            Field("seed", int, 0),
            Field("fresh", bool, False),
            _timeout(30.0),
        ),
        _diffusion_sample,
    ),
    "resolve_peer": ControlMethod(Schema(Field("peer", str, ""), _timeout(8.0)), _resolve_peer),
    "debug.offer": ControlMethod(
        Schema(Field("mib", int, 16, low=1, high=payload_check.MAX_MIB)), _debug_offer
    ),
    "debug.fetch": ControlMethod(
        Schema(Field("peer", str, ""), Field("checksum", str, ""), _timeout(4.0)), _debug_fetch
    ),
}
