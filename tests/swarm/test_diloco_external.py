"""A member whose inner steps are the user's own loop (swarm/diloco/member/external.py): the user's
thread and the driver's thread take turns on one model, and a run names the model by layout."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.nn.functional as F
from peertrain.swarm.diloco.errors import DiLoCoError, LoopClosed
from peertrain.swarm.diloco.member.external import StepHandshake, build_external_member
from peertrain.swarm.diloco.member.member import MemberState
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models import ConfigError, count_parameters, external_model_name
from torch import nn

H = 4


def user_model(width: int = 8) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))


def external_spec(model: nn.Module, **settings) -> DiLoCoSpec:
    return DiLoCoSpec(
        model=external_model_name(model),
        model_settings={"params": count_parameters(model)},
        dataset="external",
        inner_steps=H,
        codec="fp32",
        **settings,
    )


def train_steps(model, optimizer, handshake, steps: int, losses: list[float]) -> None:
    """The user's loop: `steps` SGD steps on fixed data, counting each with the handshake."""
    x, y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 2
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        handshake.user_step(loss.item())


def test_a_round_waits_for_the_users_steps_and_its_delta_is_what_they_trained():
    model = user_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    handshake = StepHandshake()
    built = build_external_member(
        external_spec(model), model=model, optimizer=optimizer, handshake=handshake
    )
    member = built.member
    start = member.global_params.clone()
    payload: list[bytes] = []
    driver = threading.Thread(target=lambda: payload.append(member.prepare_update()))
    driver.start()
    assert handshake.wait_for_user_turn(5.0, stop=lambda: False)
    losses: list[float] = []
    train_steps(model, optimizer, handshake, H, losses)
    driver.join(5.0)
    assert not driver.is_alive()
    trained = member.layout.flatten()
    delta = member.encoder.codec.decode(payload[0], member.layout.numel)
    assert torch.allclose(delta, start - trained)  # Δ = θ_global − θ_local after the H steps
    assert member.inner.step == H
    assert built.eval_loss() == pytest.approx(sum(losses) / H)


def test_the_user_waits_while_the_group_holds_the_model():
    handshake = StepHandshake()
    with pytest.raises(DiLoCoError, match="holds the model"):
        handshake.user_step(1.0)  # before the driver handed it over
    with pytest.raises(DiLoCoError, match="over 0.3 s"):
        handshake.wait_for_user_turn(0.3, stop=lambda: False)
    assert handshake.wait_for_user_turn(5.0, stop=lambda: True) is False  # the run is over


def test_closing_ends_a_driver_waiting_for_the_user():
    handshake = StepHandshake()
    failure: list[BaseException] = []

    def driver() -> None:
        try:
            handshake.hand_to_user(H)
        except LoopClosed as exc:
            failure.append(exc)

    thread = threading.Thread(target=driver)
    thread.start()
    handshake.wait_for_user_turn(5.0, stop=lambda: False)
    handshake.close()
    thread.join(5.0)
    assert not thread.is_alive() and failure


def test_a_round_the_group_closed_without_us_ends_at_the_users_next_step():
    """The user's loop is our inner phase: once the group closed the round, their next step is
    the round's last (inner_phase.py), whatever H says."""
    handshake, overtaken, taken = StepHandshake(), threading.Event(), []
    thread = threading.Thread(
        target=lambda: taken.append(handshake.hand_to_user(1000, overtaken.is_set))
    )
    thread.start()
    assert handshake.wait_for_user_turn(5.0, stop=lambda: False)
    assert handshake.user_step(2.0) is False
    overtaken.set()
    time.sleep(0.5)  # the driver looks every 0.2 s
    assert handshake.user_step(1.5) is True  # handed back
    thread.join(5.0)
    assert taken == [(2, [2.0, 1.5])]


def test_adopting_a_state_keeps_the_users_optimizer_object_but_clears_its_moments():
    model = user_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    built = build_external_member(
        external_spec(model), model=model, optimizer=optimizer, handshake=StepHandshake()
    )
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert optimizer.state
    shared = built.member.snapshot(include_local=False)
    built.member.restore(MemberState(round=3, params=shared.params, momentum=shared.momentum))
    assert built.member.inner.optimizer is optimizer and not optimizer.state
    assert built.member.round == 3


def test_a_model_of_another_layout_is_refused_naming_both():
    ours, theirs = user_model(width=8), user_model(width=9)
    with pytest.raises(ConfigError, match="every member must bring the same architecture"):
        build_external_member(
            external_spec(ours),
            model=theirs,
            optimizer=torch.optim.SGD(theirs.parameters(), lr=0.1),
            handshake=StepHandshake(),
        )


def test_no_daemon_can_build_a_user_supplied_model_or_its_data():
    spec = external_spec(user_model())
    with pytest.raises(ConfigError, match=r"peertrain.DiLoCo\(model, optimizer"):
        spec.model_config().build()
    with pytest.raises(ConfigError, match="user's own training loop"):
        spec.dataset_config().build()
    assert DiLoCoSpec.from_bytes(spec.to_bytes()) == spec  # it travels as any spec does
