"""A disputed shard: every member fetches its inputs (each checked against its sender's signed
commitment), recomputes the owner's statistics and output, and blames whoever signed a false
number: the owner (false statistics, an output that is not the aggregate, or none), or the
senders whose signed checks accused an honest owner. Every member holds the same signed
messages and the same inputs, so every member reaches the same verdict."""

from __future__ import annotations

import logging

import torch
import trio

from .checks import RELATIVE, sender_facts
from .decide import Decision, rows_of
from .messages import ShardStatistics, floats, pack_floats
from .owners import owner_order
from .transport import FetchFailed

log = logging.getLogger(__name__)


async def recompute(r, decision: Decision, seed: bytes, bad, chosen, local, disputes) -> bool:
    """Recompute the `bad` shards from their inputs; True when a shard's statistics were false
    (the round must decide again), False when only outputs or accusers were."""
    replaced = False
    for k in bad:
        owner, part = chosen[k]
        # the decision's senders, not all the owner names: a member of the group whose
        # commitment never reached us cannot be checked (the decision left it out), and looking
        # it up crashed the member's run (a KeyError in the sharded Sybil e2e on a fresh clone;
        # not reproduced in process)
        senders = list(decision.senders)
        local[k] = await _inputs(r, k, senders, owner)
        held = [s for s in senders if s in local[k]]
        true = r.rule.statistics([local[k][s] for s in held])
        if held != senders or not _same(true, rows_of(part, senders)):
            _blame(r, disputes, k, owner, "partial statistics that its inputs do not give")
            chosen[k] = (None, _statistics(k, held, true))
            replaced = True
            continue
        _judge_output(r, decision, seed, k, owner, disputes, local[k])
    return replaced


def _judge_output(r, decision, seed, k, owner, disputes, sources) -> None:
    out = r.write_shard(k, decision, sources)
    payload = bytes(r.codec.encode(out))
    claim = r.board.outputs.get((decision.attempt, k, owner))
    if claim is not None and claim.decision != decision.digest:
        # members raced to different decisions (each chose other owners' statistics): the
        # owner wrote for another one, no lie about ours; our recomputation stands for us
        log.warning("round %d shard %d: its owner decided apart from us", r.round_, k)
        return
    if claim is None:
        _blame(r, disputes, k, owner, "no output for its shard")
    elif r.fetched.get((decision.attempt, k)) != payload:
        _blame(r, disputes, k, owner, "an output that is not the aggregate of its inputs")
    else:  # the owner was right: whoever signed checks that disagree with its inputs lied
        decoded = r.codec.decode(payload, out.numel())
        for sender in decision.accepted:
            if _checks_lie(r, decision, seed, k, sender, sources[sender], decoded):
                _blame(r, disputes, k, sender, "checks that accuse an honest owner")


def _checks_lie(r, decision, seed, k, sender, source, out) -> bool:
    checks = r.board.checks.get((decision.attempt, sender))
    if checks is None:
        return True  # withheld: it made every member fetch the shard's inputs
    if checks.decision != decision.basis(seed):
        # another decision's (members raced to different statistics): no lie about this one.
        # Judged as lies, they once had every honest member of a 25M run ban every other
        return False
    n = len(r.shards)
    true = torch.tensor(sender_facts(r.rule, seed, k, source.read(0, source.numel), out))
    signed = torch.tensor(
        [floats(getattr(checks, f), n, what=f)[k] for f in ("projections", "sq_norms", "rows")]
    )
    scale = true.abs().max().clamp_min(1e-30)
    return bool(((signed - true).abs() > 1e-4 * scale).any())


async def _inputs(r, k: int, senders, owner) -> dict:
    """Shard k of every sender's update, checked against its commitment: from the sender, or
    from the owner (which serves what it received)."""
    got: dict = {}

    async def one(sender: str) -> None:
        commitment = r.board.commitments[sender]
        want, size = commitment.digests[k], commitment.sizes[k]
        for peer in (sender, owner, *owner_order(r.group, k, round_=r.round_, salt=r.salt)[:2]):
            if peer is None:
                continue
            try:
                payload = await r.transport.fetch(peer, want, size)
            except FetchFailed:
                continue
            got[sender] = r.slice_source(k, payload)
            return

    async with trio.open_nursery() as nursery:
        for sender in senders:
            nursery.start_soon(one, sender)
    return got


def _same(a, b) -> bool:
    if not torch.allclose(a.sq_norms, b.sq_norms, rtol=RELATIVE, atol=0):
        return False
    if (a.gram is None) != (b.gram is None):
        return False
    return a.gram is None or torch.allclose(
        a.gram, b.gram, rtol=RELATIVE, atol=1e-12 * float(a.sq_norms.abs().max())
    )


def _statistics(k: int, senders, stats) -> ShardStatistics:
    return ShardStatistics(
        shard=k,
        senders=tuple(senders),
        sq_norms=pack_floats(stats.sq_norms),
        gram=b"" if stats.gram is None else pack_floats(stats.gram.flatten()),
    )


def _blame(r, disputes, k: int, peer, why: str) -> None:
    if peer is None:
        return
    log.warning("round %d shard %d: %s sent %s", r.round_, k, peer[:12], why)
    disputes.append((k, peer, why))
    r.on_penalty(peer, f"round {r.round_} shard {k}: {why}")
