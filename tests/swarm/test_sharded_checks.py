"""The checks every member runs on a shard's owner (swarm/exchange/sharded/checks.py), on
numbers alone: an honest int8 output passes, and a lie is caught even when the round's random
projection happens to be blind to it."""

from __future__ import annotations

import torch
from peertrain.swarm.exchange.codec import ProtocolCodec
from peertrain.swarm.exchange.sharded.checks import ShardClaims, failed_check, quantization_slack


def claims_for(out: torch.Tensor, payload: bytes, inputs: list[torch.Tensor], weights):
    """Shard claims as members build them, with ρ's projections taken as given: the senders'
    (signed) and the output's equal to what the weights say, i.e. a ρ that sees no error."""
    g = torch.stack(inputs).double()
    sq = (g * g).sum(1)
    projections = torch.zeros(len(inputs), dtype=torch.float64)
    return ShardClaims(
        gram_diagonal=sq,
        gram_times_weights=None,  # the mean: no Gram
        out_projection=0.0,
        out_sq_norm=float(out.double() @ out.double()),
        out_slack=quantization_slack(payload, out, "int8", ProtocolCodec("int8").block_size),
        sender_projections=projections,
        sender_sq_norms=sq,
        sender_rows=g @ out.double(),
        weights=weights,
    )


def test_an_output_scaled_where_the_projection_is_blind_is_still_caught():
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(5000, generator=generator) for _ in range(4)]
    weights = torch.full((4,), 0.25, dtype=torch.float64)
    true = sum(0.25 * g for g in inputs)
    codec = ProtocolCodec("int8")
    for out in (true, 1.5 * true):  # the honest owner's, then a liar's
        payload = bytes(codec.encode(out))
        decoded = codec.decode(payload, out.numel())
        claims = claims_for(decoded, payload, inputs, weights)
        why = failed_check(claims)
        if out is true:
            assert why is None
        else:
            assert why is not None and "‖out‖²" in why
