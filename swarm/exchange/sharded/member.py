"""The member's side of a sharded round, top to bottom (round.py holds its state, owner.py the
owners' duties, checks.py the checks, disputes.py what a failed check costs and whom)."""

from __future__ import annotations

import logging
from dataclasses import replace

import torch
import trio
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.aggregation.streaming import DEFAULT_CHUNK_SIZE, TensorSource, source_sq_norm
from peertrain.swarm.exchange.codec import Payload
from peertrain.swarm.exchange.errors import ExchangeFailed

from .checks import ShardClaims, draw_seed, failed_check, projection, quantization_slack
from .decide import Decision
from .disputes import recompute
from .messages import NonceReveal, digest, floats
from .round import ShardedResult, ShardedRound
from .transport import FetchFailed

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # a corrected statistic means a new decision; a liar is out after one


async def run_round(r: ShardedRound, update: Payload) -> ShardedResult:
    """One round: `update` is our update as the codec encoded it (r.codec, r.numel values)."""
    now = trio.current_time()
    opened = now if r.opened_at is None else min(now, r.opened_at)
    # never less than the patience from our own start: a counted member's message of a round
    # sent long before it would otherwise leave the owners no wait for commitments at all
    r.commit_deadline = max(now + r.patience, opened + r.patience + r.commit_wait)
    deadline = now + r.timeout + r.commit_wait
    r.mark("start")
    nonce = await r.commit(update)
    r.mark("committed")
    async with trio.open_nursery() as nursery:
        r.owner_tasks(nursery)
        result = await _attempts(r, nonce, deadline)
        nursery.cancel_scope.cancel()
    return result


async def _attempts(r: ShardedRound, nonce: bytes, deadline: float) -> ShardedResult:
    shards = [s.index for s in r.shards]
    if not await r.board.wait(lambda: all(r.statistics_of(k) for k in shards), deadline):
        missing = [k for k in shards if r.statistics_of(k) is None]
        raise ExchangeFailed(f"round {r.round_}: no statistics for shard(s) {missing}")
    r.mark("statistics in")
    chosen = {k: r.statistics_of(k) for k in shards}
    local: dict[int, dict] = {}  # disputed shards: their inputs, recomputed by us
    disputes: list[tuple[int, str, str]] = []
    for attempt in range(MAX_ATTEMPTS):
        decision = r.decide(
            attempt, {k: (None if k in local else o, p) for k, (o, p) in chosen.items()}
        )
        # one line a round: members whose digests differ decided apart, and the log says on what
        log.info(
            "round %d attempt %d: decision %s on %d senders, %d accepted",
            r.round_, attempt, decision.digest.hex()[:12], len(decision.senders),
            len(decision.accepted),
        )  # fmt: skip
        outputs = await _outputs(r, decision, local, deadline)
        r.mark("outputs in")
        verified, seed = await _verify(r, decision, outputs, nonce, deadline)
        r.mark("verified")
        bad = [k for k in shards if k not in local and not verified.get(k)]
        if not bad:
            return await _result(r, decision, outputs, disputes)
        replaced = await recompute(r, decision, seed, bad, chosen, local, disputes)
        if not replaced:  # outputs only were wrong: ours are recomputed from the inputs
            outputs.update({k: r.local_output(k, decision, local[k]) for k in bad})
            return await _result(r, decision, outputs, disputes)
    raise ExchangeFailed(f"round {r.round_}: statistics disputed in {MAX_ATTEMPTS} attempts")


async def _outputs(r: ShardedRound, decision: Decision, local: dict, deadline: float) -> dict:
    """Every shard of the aggregate, decoded: fetched from its owner as soon as the owner
    announces it and checked against the owner's committed digest, or written by us for shards
    we hold the inputs of; None where an owner published nothing or served bytes it did not
    commit to."""
    got: dict[int, torch.Tensor | None] = {}
    for k in local:
        got[k] = r.local_output(k, decision, local[k])
    async with trio.open_nursery() as nursery:
        for k in decision.owners:
            if k not in local:
                nursery.start_soon(_fetch_output, r, decision, k, got, deadline)
    return got


async def _fetch_output(
    r: ShardedRound, decision: Decision, k: int, got: dict, deadline: float
) -> None:
    owner, a = decision.owners[k], decision.attempt
    got[k] = None
    if owner is None or not await r.board.wait(lambda: (a, k, owner) in r.board.outputs, deadline):
        return
    claim = r.board.outputs[(a, k, owner)]
    try:
        payload = await r.transport.fetch(owner, claim.digest, claim.nbytes)
    except FetchFailed:
        return
    s = r.shards[k]
    try:
        got[k] = await r.compute(r.codec.decode, payload, s.stop - s.start, r.output_buffer(k))
    except DecodeError as exc:  # committed to, yet not an output: the shard is recomputed
        log.warning("round %d shard %d: %s's output does not decode: %s", r.round_, k, owner, exc)
        got[k] = None
        return
    r.fetched[(decision.attempt, k)] = payload


async def _verify(
    r: ShardedRound, decision: Decision, outputs: dict, nonce: bytes, deadline: float
) -> tuple[dict[int, bool], bytes]:
    """Reveal our nonce, draw ρ from the accepted senders' nonces, sign our checks, and run
    everyone's against every owner's claims. (Shard → whether it holds, the seed.) A nonce
    that reached some members by their deadline and not others gives them another seed: the
    checks name theirs (`Decision.basis`), and another basis is recomputed, not judged."""
    a, accepted = decision.attempt, decision.accepted
    await r.publish(NonceReveal(attempt=a, nonce=nonce))
    # a missing nonce is waited for `patience`, not the round: a member that waited to its
    # deadline sent its checks after the others stopped waiting for them, and was blamed
    revealed = min(deadline, trio.current_time() + r.patience)
    await r.board.wait(lambda: all((a, s) in r.board.reveals for s in accepted), revealed)
    r.mark("nonces in")
    nonces = [
        reveal.nonce
        for s in accepted
        if (reveal := r.board.reveals.get((a, s))) is not None
        and digest(reveal.nonce) == r.board.commitments[s].nonce_hash
    ]
    seed = draw_seed(r.round_, a, nonces)
    if r.me in accepted:
        mine = await r.compute(r.my_checks, a, seed, outputs)
        await r.publish(replace(mine, decision=decision.basis(seed)))
    r.mark("checks sent")
    await r.board.wait(lambda: all((a, s) in r.board.checks for s in accepted), deadline)
    r.mark("checks in")

    def verify() -> dict[int, bool]:  # shards we wrote ourselves (owner None) need no check
        owners = decision.owners
        return {k: _shard_holds(r, decision, k, outputs.get(k), seed) for k in owners if owners[k]}

    return await r.compute(verify), seed


def _shard_holds(r: ShardedRound, decision: Decision, k: int, out, seed: bytes) -> bool:
    payload = r.fetched.get((decision.attempt, k))
    if out is None or payload is None:
        return False
    checks = [r.board.checks.get((decision.attempt, s)) for s in decision.accepted]
    if any(c is None or c.decision != decision.basis(seed) for c in checks):
        return False  # withheld, or another decision's: the shard is recomputed from its inputs
    claim = r.board.outputs.get((decision.attempt, k, decision.owners[k]))
    if claim is None or claim.decision != decision.digest:
        return False  # written for another decision: recomputed too
    n = len(r.shards)
    column = torch.tensor(
        [
            [floats(getattr(c, f), n, what=f)[k] for f in ("projections", "sq_norms", "rows")]
            for c in checks
        ],
        dtype=torch.float64,
    ).reshape(-1, 3)  # no sender accepted: no rows (a joiner's round of one crashed its run)
    part = decision.parts[k]
    index = {s: i for i, s in enumerate(decision.senders)}
    rows = torch.tensor([index[s] for s in decision.accepted], dtype=torch.long)
    claims = ShardClaims(
        gram_diagonal=part.sq_norms[rows],
        gram_times_weights=None
        if part.gram is None
        else part.gram[rows][:, rows] @ decision.weights,
        out_projection=projection(seed, k, out),
        # blocked fp32 sums in fp64, as the statistics pass: no fp64 copy of the shard
        out_sq_norm=source_sq_norm(TensorSource(out), chunk_size=DEFAULT_CHUNK_SIZE),
        out_slack=quantization_slack(payload, out, r.codec.name, r.codec.block_size),
        sender_projections=column[:, 0],
        sender_sq_norms=column[:, 1],
        sender_rows=column[:, 2],
        weights=decision.weights,
    )
    why = failed_check(claims)
    if why is not None:
        log.warning("round %d shard %d disputed: %s", r.round_, k, why)
    return why is None


async def _result(
    r: ShardedRound, decision: Decision, outputs: dict, disputes: list
) -> ShardedResult:
    return ShardedResult(
        update=await r.compute(r.assemble, outputs),
        accepted=decision.accepted,
        rejected=decision.rejected,
        weights=tuple(decision.weights.tolist()),
        attempts=decision.attempt + 1,
        disputes=disputes,
    )
