"""The sharded update exchange over the in-memory network: every member ends a round with the
same aggregate, the one an all-gather of the same updates gives as int8 sends it, and an owner
or sender that lies is caught in the round it lies, by proof every member checks, while every
honest member ends with the honest result."""

from __future__ import annotations

import pytest
import torch
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.swarm.aggregation import build_aggregator
from peertrain.swarm.aggregation.sharded import aggregate_sharded
from peertrain.swarm.aggregation.streaming import STATS_WINDOW
from peertrain.swarm.exchange.codec import ProtocolCodec
from peertrain.swarm.exchange.errors import ExchangeFailed
from peertrain.swarm.exchange.sharded import ShardedRound, run_round
from peertrain.swarm.exchange.sharded.owner import ShardOwner
from peertrain.testing.shard_network import shard_network

NUMEL = 3 * STATS_WINDOW + 77  # four shards: three of whole statistics windows and a ragged tail


def keys(n: int):
    pairs = [create_new_key_pair(bytes([i + 1]) * 32) for i in range(n)]
    return {ID.from_pubkey(k.public_key).to_base58(): k for k in pairs}


def updates(peers, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(NUMEL, generator=g)
    return {p: base + 0.3 * torch.randn(NUMEL, generator=g) for p in sorted(peers)}


def all_gather_aggregate(rule_name: str, ups: dict[str, torch.Tensor], rnd: ShardedRound):
    """What an all-gather of the same int8 inputs aggregates to, fp32."""
    codec = ProtocolCodec("int8")

    def int8(u: torch.Tensor) -> torch.Tensor:
        parts = [u[s.start : s.stop].contiguous() for s in rnd.shards]
        return torch.cat([codec.decode(bytes(codec.encode(p)), p.numel()) for p in parts])

    decoded = [int8(u) for u in ups.values()]
    return aggregate_sharded(build_aggregator(rule_name), decoded, shards=len(rnd.shards)).update


def within_one_int8_rounding(sent: torch.Tensor, exact: torch.Tensor) -> bool:
    """`sent` is `exact` as int8 sends it: each value within half its block's step."""
    block = ProtocolCodec("int8").block_size
    pad = (-exact.numel()) % block
    steps = torch.nn.functional.pad(exact.abs(), (0, pad)).view(-1, block).amax(dim=1) / 127
    half = (steps / 2).repeat_interleave(block)[: exact.numel()]
    return bool(((sent - exact).abs() <= half * (1 + 1e-4) + 1e-6).all())


async def run_group(
    rule_name: str,
    ups,
    kinds=None,
    *,
    patience: float = 2.0,
    codec: str = "int8",
    starts: dict[int, float | None] | None = None,
    fields: dict | None = None,
    member_fields: dict[int, dict] | None = None,
    numel: int = NUMEL,
    **options,
):
    """One round of every member; (peer → result or exception, peer → penalties it gave).
    `starts`: member index → seconds it starts its round late (None: never); `fields`: more
    of every member's ShardedRound."""
    kinds, starts = kinds or {}, starts or {}
    peers = keys(len(ups))
    ups = dict(zip(peers, ups.values(), strict=True))
    results, penalties, rounds = {}, {p: [] for p in peers}, {}
    async with shard_network() as net:
        for peer, key in peers.items():
            endpoint = net.endpoint(peer)
            cls = kinds.get(list(peers).index(peer), ShardedRound)
            mine = (member_fields or {}).get(list(peers).index(peer), {})
            rnd = cls(
                run_id="run",
                round_=3,
                me=peer,
                key_pair=key,
                transport=endpoint,
                rule=build_aggregator(rule_name, **options),
                codec=ProtocolCodec(codec),
                numel=numel,
                patience=patience,
                on_penalty=lambda who, why, me=peer: penalties[me].append((who, why)),
                **{"group": list(peers), **(fields or {}), **mine},
            )
            endpoint.deliver = lambda origin, raw, board=rnd.board: board.receive(raw)
            rounds[peer] = rnd

        async def one(peer, late):
            await trio.sleep(late)
            rnd = rounds[peer]
            try:
                results[peer] = await run_round(rnd, rnd.codec.encode(ups[peer]))
            except* ExchangeFailed as group:
                results[peer] = group.exceptions[0]

        async with trio.open_nursery() as nursery:
            for i, peer in enumerate(peers):
                if (late := starts.get(i, 0.0)) is not None:
                    nursery.start_soon(one, peer, late)
    return results, penalties, rounds, ups


@pytest.mark.parametrize("rule_name", ["mean", "flag", "multi-krum"])
async def test_every_member_gets_the_all_gather_aggregate(rule_name):
    results, penalties, rounds, ups = await run_group(rule_name, updates(range(6)))
    first = next(iter(results.values())).update
    for result in results.values():
        assert torch.equal(result.update, first)
        assert result.disputes == [] and result.attempts == 1
    exact = all_gather_aggregate(rule_name, ups, next(iter(rounds.values())))
    assert within_one_int8_rounding(first, exact)
    assert all(not p for p in penalties.values())


class WrongGram(ShardedRound):
    def owner(self, shard, position):
        owner = ShardOwner(self, shard, position)
        honest = owner.statistics

        def statistics(sources):
            stats = honest(sources)
            if stats.gram is not None:
                stats.gram[0, 1] += 0.5 * float(stats.gram[0, 0])
                stats.gram[1, 0] = stats.gram[0, 1]
            return stats

        owner.statistics = statistics
        return owner


class WrongOutput(ShardedRound):
    def owner(self, shard, position):
        owner = ShardOwner(self, shard, position)
        honest = owner.output
        owner.output = lambda decision: honest(decision) * 1.5
        return owner


class UndecodableOutput(ShardedRound):
    """Commits to an output and serves exactly those bytes, which no member can decode."""

    def owner(self, shard, position):
        owner = ShardOwner(self, shard, position)
        honest = owner.encoded

        def encoded(decision):
            payload = honest(decision)
            payload[:4] = torch.tensor([float("nan")]).numpy().tobytes()  # its first scale
            return payload

        owner.encoded = encoded
        return owner


class UndecodableSlices(ShardedRound):
    """Commits to its update with a NaN block scale in shard 0's slice: signed, undecodable."""

    async def commit(self, update):
        update[:4] = torch.tensor([float("nan")]).numpy().tobytes()
        return await super().commit(update)


class SilentOwner(ShardedRound):
    def owner(self, shard, position):
        owner = ShardOwner(self, shard, position)

        async def nothing():
            await trio.sleep_forever()

        owner.run = nothing
        return owner


class FalseAccuser(ShardedRound):
    """Signs a false ⟨g, out⟩ (`lie = "rows"`) or a false ⟨ρ, g⟩ (`lie = "projections"`) for
    its first shard: either makes an honest owner's shard look wrong."""

    lie = "rows"

    def my_checks(self, attempt, seed, outputs):
        honest = super().my_checks(attempt, seed, outputs)
        fields = {f: getattr(honest, f) for f in ("projections", "sq_norms", "rows")}
        false = bytearray(fields[self.lie])
        false[:8] = torch.tensor([1e6], dtype=torch.float64).numpy().tobytes()
        fields[self.lie] = bytes(false)
        return type(honest)(attempt=attempt, **fields)


class FalseProjector(FalseAccuser):
    lie = "projections"


@pytest.mark.parametrize(
    ("cheat", "rule_name", "why"),
    [
        (WrongGram, "flag", "partial statistics"),
        (WrongOutput, "flag", "not the aggregate"),
        (WrongOutput, "mean", "not the aggregate"),
        (SilentOwner, "flag", None),
        (UndecodableOutput, "flag", "not the aggregate"),
    ],
)
async def test_a_cheating_owner_is_caught_and_the_round_ends_honest(cheat, rule_name, why):
    ups = updates(range(4), seed=1)
    honest, *_ = await run_group(rule_name, ups)
    results, penalties, rounds, _ = await run_group(rule_name, ups, kinds={0: cheat}, patience=1.0)
    cheater = list(rounds)[0]
    reference = next(iter(honest.values())).update
    for peer, result in results.items():
        if peer == cheater:
            continue
        assert torch.equal(result.update, reference), peer[:12]
        if why is not None:
            assert [who for who, _ in penalties[peer]] == [cheater] * len(penalties[peer])
            assert any(why in w for _, w in penalties[peer])


@pytest.mark.parametrize("accuser", [FalseAccuser, FalseProjector])
async def test_a_false_accusation_is_refuted_and_the_accuser_penalised(accuser):
    ups = updates(range(4), seed=2)
    honest, *_ = await run_group("flag", ups)
    results, penalties, rounds, _ = await run_group("flag", ups, kinds={1: accuser})
    accuser = list(rounds)[1]
    reference = next(iter(honest.values())).update
    for peer, result in results.items():
        assert torch.equal(result.update, reference)
        assert {who for who, _ in penalties[peer]} == {accuser}


class Equivocator(ShardedRound):
    async def commit(self, update):
        nonce = await super().commit(update)
        other = self.codec.encode(self.codec.decode(update, self.numel) + 1.0)
        await super().commit(other)  # a second, different commitment for the round
        return nonce


async def test_a_sender_committing_to_an_undecodable_slice_is_out_of_the_round_and_penalised():
    ups = updates(range(4), seed=4)
    results, penalties, rounds, _ = await run_group("flag", ups, kinds={1: UndecodableSlices})
    cheater = list(rounds)[1]
    honest = {peer: result for peer, result in results.items() if peer != cheater}
    assert len({bytes(r.update.numpy().tobytes()) for r in honest.values()}) == 1
    for result in honest.values():
        assert cheater not in result.accepted and len(result.accepted) == 3
    blamed = [why for peer in honest for who, why in penalties[peer] if who == cheater]
    assert blamed and all("does not decode" in why for why in blamed)  # by shard 0's owner
    assert all(who == cheater for peer in honest for who, _ in penalties[peer])


async def test_a_sender_equivocating_between_owners_is_out_of_the_round_and_penalised():
    ups = updates(range(5), seed=3)
    results, penalties, rounds, _ = await run_group("flag", ups, kinds={2: Equivocator})
    cheater = list(rounds)[2]
    updates_seen = {bytes(r.update.numpy().tobytes()) for r in results.values()}
    assert len(updates_seen) == 1
    for peer, result in results.items():
        assert cheater not in result.accepted and len(result.accepted) == 4
        if peer != cheater:
            assert [who for who, _ in penalties[peer]] == [cheater]
            assert "equivocation" in penalties[peer][0][1]
            assert len(rounds[peer].board.equivocators[cheater]) == 2  # both signed proofs kept


async def test_a_scaled_update_is_refused_alike_by_every_member_with_its_reason():
    ups = updates(range(5), seed=4)
    scaled = sorted(keys(5))[0]
    ups = dict(zip(keys(5), ups.values(), strict=True))
    ups[scaled] = ups[scaled] * 1000
    results, penalties, rounds, _ = await run_group("mean", ups, max_norm_ratio=4.0)
    for result in results.values():
        assert scaled not in result.accepted and len(result.accepted) == 4
        assert [(who, why.partition(":")[0]) for who, why in result.rejected] == [(scaled, "norm")]
    assert len({bytes(r.update.numpy().tobytes()) for r in results.values()}) == 1


async def test_with_fp32_outputs_the_round_is_the_all_gather_aggregate_within_float32_rounding():
    """Outputs travel in the run's codec: at fp32 nothing is rounded on the wire, and every
    member holds the all-gather's aggregate of the same fp32 updates within 1e-6."""
    ups = updates(range(4), seed=5)
    results, penalties, rounds, _ = await run_group("flag", ups, codec="fp32")
    first = next(iter(results.values())).update
    assert all(torch.equal(r.update, first) for r in results.values())
    rnd = next(iter(rounds.values()))
    exact = aggregate_sharded(
        build_aggregator("flag"), list(ups.values()), shards=len(rnd.shards)
    ).update
    assert torch.allclose(first, exact, rtol=1e-6, atol=1e-6)
    assert all(not p for p in penalties.values())


class HugeSizes(ShardedRound):
    """Commits to slices of 2^40 bytes: an owner that believed it would reserve a terabyte."""

    async def publish(self, msg):
        from peertrain.swarm.exchange.sharded.messages import ShardCommitment

        if isinstance(msg, ShardCommitment):
            msg = ShardCommitment(
                digests=msg.digests, sizes=(2**40,) * len(msg.sizes), nonce_hash=msg.nonce_hash
            )
        await super().publish(msg)


async def test_a_commitment_to_slices_of_the_wrong_size_is_refused_before_any_fetch():
    ups = updates(range(4), seed=6)
    results, penalties, rounds, _ = await run_group("flag", ups, kinds={0: HugeSizes})
    liar = list(rounds)[0]
    for peer, result in results.items():
        assert liar not in result.accepted and len(result.accepted) == 3
        if peer != liar:
            assert [who for who, _ in penalties[peer]] == [liar]
            assert liar not in rounds[peer].board.commitments
