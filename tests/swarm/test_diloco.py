"""DiLoCo's training core: the inner loop learns, the outer step is Nesterov SGD on Δ, and members
exchanging updates end every round with the same state hash."""

from __future__ import annotations

import threading

import pytest
import torch
from peertrain.swarm.data import DigitsDatasetConfig
from peertrain.swarm.diloco import (
    Contribution,
    DiLoCoMember,
    InnerConfig,
    InnerLoop,
    NesterovOuterOptimizer,
    OuterConfig,
    ParamLayout,
    ProtocolCodec,
    RoundFailed,
    data_parallel_bytes,
    evaluate,
    learning_rate,
)
from peertrain.swarm.diloco.member.member import rejection_kind
from peertrain.swarm.models import MLPConfig
from peertrain.testing.diloco_group import InProcessExchange, LocalGroup

MODEL = MLPConfig(hidden=16, depth=1)
INNER = InnerConfig(steps=5, batch_size=32, lr=1e-2, warmup_steps=3)


@pytest.fixture(scope="module")
def digits():
    return DigitsDatasetConfig().build()


def make_members(
    digits, n: int, *, codec: str = "fp32", seed: int = 0, model_seed: int = 0
) -> list[DiLoCoMember]:
    return [
        DiLoCoMember(
            MODEL.build(seed=model_seed),
            digits.train_batches(k, n, batch_size=INNER.batch_size, seed=seed),
            inner=INNER,
            codec=ProtocolCodec(codec),
        )
        for k in range(n)
    ]


def test_inner_loop_reduces_loss(digits):
    model = MLPConfig(hidden=16, depth=1).build(seed=0)
    evalset = digits.eval_batches(batch_size=360)
    before = evaluate(model, evalset)
    report = InnerLoop(model, digits.train_batches(0, 1, batch_size=32, seed=0), INNER).run(60)
    after = evaluate(model, evalset)
    assert after < 0.5 * before
    assert report.steps == 60 and report.samples == 60 * 32


def test_learning_rate_warms_up_then_holds_or_decays():
    config = InnerConfig(lr=1e-3, warmup_steps=4)
    assert [learning_rate(config, s) for s in range(5)] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3]
    )
    assert learning_rate(config, 10_000) == 1e-3
    cosine = InnerConfig(lr=1e-3, warmup_steps=0, total_steps=100, min_lr=1e-4)
    assert learning_rate(cosine, 0) == pytest.approx(1e-3)
    assert learning_rate(cosine, 50) == pytest.approx(5.5e-4)
    assert learning_rate(cosine, 100) == pytest.approx(1e-4)


def test_outer_step_is_nesterov_momentum_by_hand():
    # θ = [1, 2], lr 0.5, m 0.9; Δ1 = [0.2, -0.4], Δ2 = [0.1, 0.1]
    outer = NesterovOuterOptimizer(2, OuterConfig(lr=0.5, momentum=0.9))
    theta = torch.tensor([1.0, 2.0])
    outer.step(theta, torch.tensor([0.2, -0.4]))
    # b = [0.2, -0.4]; step = Δ + m b = [0.38, -0.76]; θ = θ - 0.5 step = [0.81, 2.38]
    assert theta.tolist() == pytest.approx([0.81, 2.38])
    outer.step(theta, torch.tensor([0.1, 0.1]))
    # b = 0.9 [0.2, -0.4] + [0.1, 0.1] = [0.28, -0.26]; step = [0.1 + 0.252, 0.1 - 0.234]
    assert outer.momentum_buffer.tolist() == pytest.approx([0.28, -0.26])
    assert theta.tolist() == pytest.approx([0.81 - 0.5 * 0.352, 2.38 + 0.5 * 0.134])


def test_outer_step_matches_torch_sgd_nesterov():
    g = torch.Generator().manual_seed(0)
    start = torch.randn(50, generator=g)
    deltas = [torch.randn(50, generator=g) for _ in range(4)]
    theta = start.clone()
    outer = NesterovOuterOptimizer(50, OuterConfig())
    reference = torch.nn.Parameter(start.clone())
    sgd = torch.optim.SGD([reference], lr=0.7, momentum=0.9, nesterov=True)
    for delta in deltas:
        outer.step(theta, delta)
        reference.grad = delta.clone()
        sgd.step()
    torch.testing.assert_close(theta, reference.detach())


def test_pseudo_gradient_is_global_minus_local(digits):
    (member,) = make_members(digits, 1)
    start = member.layout.flatten()
    payload = member.prepare_update()
    delta = member.encoder.codec.decode(payload, member.layout.numel)
    torch.testing.assert_close(delta, start - member.layout.flatten())
    # a lone member with outer lr 1 and no momentum would land exactly on its local weights
    member.outer = NesterovOuterOptimizer(member.layout.numel, OuterConfig(lr=1.0, momentum=0.0))
    local = member.layout.flatten()
    member.apply_update([Contribution(sender="me", payload=payload)])
    torch.testing.assert_close(member.layout.flatten(), local)


def test_three_members_in_threads_end_with_identical_hashes(digits):
    members = make_members(digits, 3)
    hub = InProcessExchange(3, timeout=30)
    reports: dict[int, list] = {k: [] for k in range(3)}

    def work(k: int) -> None:
        for _ in range(4):
            reports[k].append(members[k].run_round(hub.endpoint(f"peer-{k}")))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in range(4):
        hashes = {reports[k][r].state_hash for k in range(3)}
        assert len(hashes) == 1, f"round {r} diverged"
        assert reports[0][r].accepted == ("peer-0", "peer-1", "peer-2")
    assert len({reports[0][r].state_hash for r in range(4)}) == 4  # the state moves every round
    flats = [m.layout.flatten() for m in members]
    assert all(torch.equal(flats[0], f) for f in flats[1:])

    # The same group stepped in one thread gives bit-identical results.
    group = LocalGroup(make_members(digits, 3), names=["peer-0", "peer-1", "peer-2"])
    for _ in range(4):
        sequential = group.run_round()
    assert sequential[0].state_hash == reports[0][3].state_hash


def test_group_training_lowers_eval_loss_with_int8_and_error_feedback(digits):
    members = make_members(digits, 3, codec="int8")
    group = LocalGroup(members)
    evalset = digits.eval_batches(batch_size=360)
    before = evaluate(members[0].model, evalset)
    for _ in range(8):
        reports = group.run_round()
    assert len({r.state_hash for r in reports}) == 1
    assert evaluate(members[0].model, evalset) < 0.5 * before
    assert reports[0].payload_bytes < 0.3 * 4 * members[0].layout.numel  # int8: ~1 byte per value
    assert members[0].encoder.residual.abs().sum() > 0  # error feedback carries what int8 dropped
    assert group.bytes_sent == 8 * 3 * reports[0].payload_bytes


def test_bad_updates_are_rejected_and_the_round_completes(digits):
    members = make_members(digits, 2)
    payloads = [m.prepare_update() for m in members]
    numel = members[0].layout.numel
    nan = torch.full((numel,), float("nan")).numpy().tobytes()
    huge = torch.full((numel,), 1e6).numpy().tobytes()
    contributions = [
        Contribution(sender="a", payload=payloads[0]),
        Contribution(sender="b", payload=payloads[1]),
        Contribution(sender="c", payload=payloads[1][:-4]),  # wrong size
        Contribution(sender="d", payload=nan),  # NaN
        Contribution(sender="a", payload=payloads[1]),  # a second update from the same sender
        Contribution(
            sender="e", payload=(bytes(payloads[0][:-4]) + b"\x00\x00\x80\x7f")
        ),  # one +Inf
        Contribution(sender="f", payload=huge),  # decodes, but the aggregator refuses its norm
        Contribution(sender="g", payload=payloads[0]),
    ]
    reports = [m.apply_update(contributions) for m in members]
    assert reports[0].accepted == ("b", "g")
    assert [sender for sender, _ in reports[0].rejected] == ["a", "a", "c", "d", "e", "f"]
    assert "norm" in dict(reports[0].rejected)["f"]
    kinds = [rejection_kind(why) for _, why in reports[0].rejected]  # a metrics label: few values
    assert kinds == [
        "equivocation",
        "equivocation",
        "undecodable",
        "undecodable",
        "undecodable",
        "norm",
    ]
    assert reports[0].state_hash == reports[1].state_hash
    assert torch.isfinite(members[0].layout.flatten()).all()


def test_a_round_with_no_usable_update_keeps_the_global_state(digits):
    (member,) = make_members(digits, 1)
    before = member.layout.flatten()
    member.prepare_update()
    report = member.apply_update([Contribution(sender="x", payload=b"junk")])
    assert report.accepted == () and member.round == 1
    assert torch.equal(member.layout.flatten(), before)  # the model is reset to θ_global


def test_resuming_from_a_snapshot_is_bit_identical_to_never_stopping(digits):
    group = LocalGroup(make_members(digits, 2, codec="int8"))
    for _ in range(2):
        group.run_round()
    saved = [m.snapshot() for m in group.members]
    for _ in range(2):
        uninterrupted = group.run_round()

    restarted = make_members(digits, 2, codec="int8", model_seed=99)  # weights all overwritten
    for member, state in zip(restarted, saved, strict=True):
        member.restore(state)
    group2 = LocalGroup(restarted)
    for _ in range(2):
        resumed = group2.run_round()
    assert resumed[0].state_hash == uninterrupted[0].state_hash


def test_a_joiner_with_the_shared_state_only_agrees_on_the_hash(digits):
    group = LocalGroup(make_members(digits, 2))
    for _ in range(2):
        group.run_round()
    shared = group.members[0].snapshot(include_local=False)
    assert shared.inner_optimizer is None and shared.residual is None
    (joiner,) = make_members(digits, 1, model_seed=5)
    joiner.restore(shared)
    assert joiner.state_hash() == group.members[0].state_hash() == shared.state_hash()


def test_param_layout_round_trips_named_tensors():
    model = MODEL.build(seed=0)
    layout = ParamLayout(model)
    flat = layout.flatten()
    assert torch.equal(layout.join(layout.named(flat)), flat)
    with pytest.raises(ValueError, match="missing"):
        layout.join({})


def test_data_parallel_bytes_is_one_fp32_gradient_per_member_per_step():
    assert data_parallel_bytes(1000, steps=10, members=4) == 1000 * 4 * 10 * 4


def test_in_process_exchange_closes_a_round_at_its_deadline_and_drops_late_payloads():
    hub = InProcessExchange(3, timeout=0.3, history=2)
    results: dict[str, list[str]] = {}

    def send(name: str) -> None:
        got = hub.endpoint(name).exchange(0, name.encode())
        results[name] = [c.sender for c in got]

    threads = [threading.Thread(target=send, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"a": ["a", "b"], "b": ["a", "b"]}  # closed without the missing "c"
    send("c")  # "c" is late: it gets round 0 as the others saw it, its own payload dropped
    assert results["c"] == ["a", "b"]
    for r in (1, 2):  # all present: each round closes as soon as its last payload lands
        threads = [threading.Thread(target=hub.endpoint(n).exchange, args=(r, b"x")) for n in "abc"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=5)
    assert set(hub._closed) == {1, 2}  # round 0 fell out of the history
    with pytest.raises(RoundFailed, match="older"):
        hub.endpoint("c").exchange(0, b"again")
