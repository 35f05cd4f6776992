"""`peertrain.DiLoCo`: DiLoCo around a user's own training loop, like hivemind.Optimizer.

    diloco = peertrain.DiLoCo(model, optimizer, run="digits", inner_steps=20, rounds=10)
    while not diloco.finished:
        loss = model(x, y) ... ; loss.backward(); optimizer.step(); optimizer.zero_grad()
        diloco.step(loss)   # every 20th call: exchange with the group, θ_global now in `model`

The process runs an embedded node (embedded.py) whose run's member is built around the user's
model and whose inner loop is the user's (swarm/diloco/member/external.py): `step()` counts their
optimizer steps, and at H hands the model to the driver, which computes Δ = θ_global − θ_local,
exchanges it (int8 by default, robust aggregation), takes the outer Nesterov step and hands the
model back holding θ_global. The run's spec names the model by a fingerprint of its parameter
layout (`external:<fingerprint>`), so every member is checked to hold the same architecture.
The first to start creates the run; the others join it through any member's `address`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from peertrain.swarm.diloco.errors import DiLoCoError
from peertrain.swarm.diloco.member.external import StepHandshake, build_external_member
from peertrain.swarm.models import count_parameters, external_model_name
from torch import nn

from .embedded import EmbeddedNode

DEFAULT_TIMEOUT = 600.0


class DiLoCo:
    """Wrap `model` and the `inner_optimizer` that steps it in a DiLoCo run named `run`.

    `peers`: addresses of members to join through (none: this process creates the run unless
    `create=False`). `node`: a started `peertrain.Node` to use, e.g. to print its address before
    the group forms (default: one started here with `listen` and `peers`; then `close()` stops
    it). `run_settings`: any other DiLoCo run setting (rounds, min_members, codec,
    aggregator, outer_lr, outer_momentum, round_timeout, start_timeout; diloco/member/run_spec.py),
    used when this process creates the run. `eval_fn(model) -> loss` evaluates θ_global after
    each round for status (default: the mean of the losses passed to `step`). `timeout`: the
    longest `step()` waits for the group at the end of a round (or the constructor for a start).
    """

    def __init__(
        self,
        model: nn.Module,
        inner_optimizer: torch.optim.Optimizer,
        *,
        run: str,
        node: EmbeddedNode | None = None,
        inner_steps: int = 50,
        peers: Sequence[str] = (),
        create: bool | None = None,
        listen: Sequence[str] = ("/ip4/0.0.0.0/tcp/0",),
        eval_fn: Callable[[nn.Module], float] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        **run_settings: Any,
    ) -> None:
        self.model, self.optimizer, self.timeout = model, inner_optimizer, timeout
        self.finished = False
        self._handshake = StepHandshake()
        self._own_node = node is None
        self.node = node or EmbeddedNode(listen=listen, peers=peers).start()
        try:
            runs = self._daemon.runs
            runs.member_factory = lambda spec, _peer: build_external_member(
                spec, model=model, optimizer=inner_optimizer, handshake=self._handshake,
                eval_fn=eval_fn,
            )  # fmt: skip
            if create if create is not None else not self.node.config.bootstrap:
                spec = self._spec(inner_steps, run_settings)
                session = self.node.call(runs.create, name=run, mode="diloco", spec=spec)
            else:
                session = self.node.call(runs.join, run, timeout=min(timeout, 120.0))
            self.run_id = session.run_id
            self.finished = not self._handshake.wait_for_user_turn(timeout, self._run_over)
        except BaseException:
            self.close()
            raise

    # -- the user's loop ------------------------------------------------------------------------

    def step(self, loss: float | torch.Tensor | None = None) -> bool:
        """Call after each `optimizer.step()`. True when this step ended a round: the model now
        holds the group's θ_global. After the run's last round, training goes on locally."""
        if self.finished:
            return False
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().item()
        if not self._handshake.user_step(loss):
            return False
        self.finished = not self._handshake.wait_for_user_turn(self.timeout, self._run_over)
        return True

    def close(self) -> None:
        """Stop the embedded node (if this object started it) and end the user's side of the
        run. The node is told first: a driver waiting for our steps then ends with it."""
        if self._own_node:
            self.node.request_stop()
        self._handshake.close()
        if self._own_node:
            self.node.stop()

    def __enter__(self) -> DiLoCo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the group says --------------------------------------------------------------------

    @property
    def address(self) -> str:
        """What another process passes as `peers=[…]` to join this run."""
        return self.node.address

    @property
    def round(self) -> int:
        return self._progress().get("round", 0)

    @property
    def state_checksum(self) -> str:
        """The group's state (θ_global and outer momentum) checksum: equal on every member."""
        return self._progress().get("state_checksum", "")

    @property
    def loss(self) -> float:
        loss = self._progress().get("loss")
        return math.nan if loss is None else loss

    def status(self) -> dict[str, Any]:
        """This run's part of `peertrain status --json`."""
        return dict(self._session().status())

    # -- inside ---------------------------------------------------------------------------------

    @property
    def _daemon(self):
        assert self.node.daemon is not None
        return self.node.daemon

    def _spec(self, inner_steps: int, settings: dict[str, Any]) -> dict[str, Any]:
        return {
            **settings,
            "model": external_model_name(self.model),
            "model_settings": {"params": count_parameters(self.model)},
            "dataset": "external",
            "inner_steps": inner_steps,
        }

    def _session(self):
        session = self._daemon.runs.sessions.get(self.run_id)
        if session is None:
            raise DiLoCoError("this node is no longer in the run")
        return session

    def _progress(self) -> dict[str, Any]:
        driver = self._session().driver
        return vars(driver.progress) if driver is not None else {}

    def _run_over(self) -> bool:
        """No further turn will come: the run finished (True), or failed (raised)."""
        session = self._daemon.runs.sessions.get(getattr(self, "run_id", ""))
        if session is None:
            return False  # still being created or joined
        if session.error is not None and (session.quarantined or session.driver is None):
            raise DiLoCoError(f"the run failed: {session.error}")
        return session.driver is not None and session.driver.progress.phase == "finished"
