"""A DiLoCo member whose inner steps are the user's own training loop, in the user's own thread.

`peertrain.DiLoCo` (node/api/diloco.py) wraps a script's model and optimizer. The member and its
driver are the ordinary ones; only the inner loop differs: `ExternalInnerLoop.run(H)` hands the
model to the user's thread and blocks (on the driver's torch thread) until the user has taken H
optimizer steps, then the member computes Δ = θ_global − θ_local as always. One model, two
threads, strictly taking turns (`StepHandshake`): the user trains only between `run(H)` calls'
start and end, and everything the driver does to the model (outer step, re-sync, evaluation,
checkpoint) happens while the user's thread waits in `DiLoCo.step()`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from peertrain.swarm.diloco.errors import DiLoCoError, LoopClosed
from peertrain.swarm.diloco.member.build import BuiltMember, member_settings
from peertrain.swarm.diloco.member.config import InnerConfig
from peertrain.swarm.diloco.member.inner_loop import InnerReport
from peertrain.swarm.diloco.member.member import DiLoCoMember
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models.config import ConfigError
from peertrain.swarm.models.external import ExternalModelConfig
from torch import nn

USER, DRIVER = "user", "driver"


class StepHandshake:
    """Whose turn it is on the shared model: the driver's (between rounds) or the user's (H
    inner steps). Each side blocks on one condition until the other hands the model over."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._owner = DRIVER
        self._wanted = 0
        self._taken = 0
        self._losses: list[float] = []
        self._closed = False

    # -- the driver's torch thread --------------------------------------------------------------

    def hand_to_user(
        self, steps: int, stop: Callable[[], bool] | None = None
    ) -> tuple[int, list[float]]:
        """Give the model (holding θ_global) to the user for `steps` steps; return the steps
        taken and the losses they reported once the user hands it back. When `stop()` turns
        true first, the user's next step is the round's last (the group closed it without us)."""
        with self._turn:
            self._wanted, self._taken, self._losses = steps, 0, []
            self._owner = USER
            self._turn.notify_all()
            while not self._turn.wait_for(lambda: self._owner == DRIVER or self._closed, 0.2):
                if stop is not None and stop():
                    self._wanted = 0  # the step in progress hands the model back
            if self._closed:
                raise LoopClosed("the training loop was closed during the round")
            return self._taken, list(self._losses)

    # -- the user's thread ----------------------------------------------------------------------

    def user_step(self, loss: float | None) -> bool:
        """Count one optimizer step; True when it was the round's last (the model goes back)."""
        with self._turn:
            if self._owner != USER:
                raise DiLoCoError("step() called while the group holds the model")
            self._taken += 1
            if loss is not None:
                self._losses.append(float(loss))
            if self._taken < self._wanted:
                return False
            self._owner = DRIVER
            self._turn.notify_all()
            return True

    def wait_for_user_turn(self, timeout: float, stop: Callable[[], bool]) -> bool:
        """Block until the user may train (True), or `stop()` says no turn will come (False).
        `stop` may raise to end the wait with the reason; so does a `timeout` in seconds."""
        deadline = time.monotonic() + timeout
        with self._turn:
            while self._owner != USER:
                if self._closed:
                    raise LoopClosed("the training loop is closed")
                if stop():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DiLoCoError(f"the group kept the model for over {timeout:g} s")
                self._turn.wait(min(left, 0.2))  # `stop` reads the driver, which cannot notify us
            return True

    def close(self) -> None:
        with self._turn:
            self._closed = True
            self._turn.notify_all()


class ExternalInnerLoop:
    """InnerLoop's interface (config, step, optimizer, batches, run, reset_optimizer) over the
    user's loop: `run(H)` waits for their H steps instead of taking them."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        handshake: StepHandshake,
        config: InnerConfig,
    ) -> None:
        self.model, self.optimizer, self.config = model, optimizer, config
        self.handshake = handshake
        self.batches = None  # the user's loop has the data
        self.step = 0
        self.last_report: InnerReport | None = None

    def run(self, steps: int, stop: Callable[[], bool] | None = None) -> InnerReport:
        started = time.perf_counter()
        taken, losses = self.handshake.hand_to_user(steps, stop)
        self.step += taken
        self.last_report = InnerReport(
            steps=taken,
            first_loss=losses[0] if losses else math.nan,
            last_loss=losses[-1] if losses else math.nan,
            mean_loss=sum(losses) / len(losses) if losses else math.nan,
            samples=taken * self.config.batch_size,
            seconds=time.perf_counter() - started,
        )
        return self.last_report

    def reset_optimizer(self, state: Mapping[str, Any] | None) -> None:
        """The user's optimizer, fresh (its moments cleared, as a joiner's AdamW) or holding our
        own checkpoint's `state`. The object stays theirs: their loop keeps stepping it."""
        if state is None:
            self.optimizer.state.clear()
        else:
            import copy

            self.optimizer.load_state_dict(copy.deepcopy(dict(state)))


@dataclass(slots=True, kw_only=True)
class ExternalBuiltMember(BuiltMember):
    """A member around the user's model: no dataset, no shards; the loss shown is `eval_fn`'s
    on θ_global, or the mean loss the user reported over the last round's inner steps."""

    eval_fn: Callable[[nn.Module], float] | None = None

    def use_shard(self, shard: int) -> None:
        self.shard = shard  # the user's loop decides what each member trains on

    def sample(self, prompt: str, max_new_tokens: int = 160, *, seed: int = 0) -> str:
        raise TypeError("a user-supplied model cannot be sampled by the node")

    def eval_loss(self) -> float:
        if self.eval_fn is not None:
            with torch.no_grad():
                return float(self.eval_fn(self.member.model))
        report = getattr(self.member.inner, "last_report", None)
        return report.mean_loss if report is not None else math.nan


def build_external_member(
    spec: DiLoCoSpec,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    handshake: StepHandshake,
    eval_fn: Callable[[nn.Module], float] | None = None,
) -> ExternalBuiltMember:
    """A member of an `external:` run around the user's `model`; refused unless the run's
    fingerprint is the model's."""
    config = spec.model_config()
    if not isinstance(config, ExternalModelConfig):
        raise ConfigError(
            f"this run trains the model {spec.model!r}, not a user-supplied one: join it with "
            "`peertrain join`, or create a run of your own from this script"
        )
    config.check(model)
    inner = InnerConfig(steps=spec.inner_steps, batch_size=spec.batch_size)
    loop = ExternalInnerLoop(model, optimizer, handshake, inner)
    member = DiLoCoMember(model, None, inner=inner, inner_loop=loop, **member_settings(spec))
    return ExternalBuiltMember(
        member=member, shard=0, eval_batches=[], spec=spec, dataset=None, eval_fn=eval_fn
    )
