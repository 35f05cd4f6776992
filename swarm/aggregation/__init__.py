"""Byzantine-robust aggregation of outer updates: one interface, five rules.

Usage (sync and CPU/GPU-bound: call it from a worker thread, `trio.to_thread.run_sync`)::

    from peertrain.swarm.aggregation import build_aggregator

    agg = build_aggregator("flag")                  # or mean, median, trimmed-mean, multi-krum
    result = agg.aggregate(updates, numel=n)        # flat fp32 tensors; numel=None: most common
    theta_delta = result.update                     # flat fp32, same length
    for verdict in result.rejected:                 # penalise these senders
        print(verdict.index, verdict.reason, verdict.detail)

Streaming, for updates too large to hold p fp32 copies of (e.g. kept int8 and dequantized a slice
at a time): pass objects with `numel` and `read(start, stop) -> fp32 tensor` (`UpdateSource`)::

    result = agg.aggregate_streaming(sources, out=buffer)   # buffer: the one full-size tensor

Both paths run the same pipeline: structure checks (tensor, float32, 1-D, common length, device)
→ one chunked statistics pass (norms, plus the p×p Gram for Multi-Krum and Flag) → value checks
(NaN/Inf, norm > `max_norm_ratio` × median norm) → the rule on the accepted inputs → the output,
written chunk by chunk. `result.verdicts` has one `Verdict` per input, in order; rejection is
never an exception. If too few inputs remain for the rule, `NotEnoughUpdates` is raised (with the
verdicts attached). Unknown names/options raise `AggregatorConfigError`.

Rules and options (every rule also takes `max_norm_ratio=1000.0` (None: off) and `chunk_size`):

=============  ===========================  ====================================================
name           options                      notes
=============  ===========================  ====================================================
mean           –                            baseline; not robust
median         –                            coordinate-wise; mean of middle two for even p
trimmed-mean   f=1                          drops f lowest and f highest per coordinate; p > 2f
multi-krum     f=1, m=None (p − f)          mean of m most central inputs; p ≥ 2f + 3
flag           r=8, lam=0.0, iterations=1,  Flag Aggregator (Almasi et al. 2024) in Gram space,
               eps=1e-7, rescale="median"   output rescaled to the median input norm
=============  ===========================  ====================================================

`result.weights` (linear rules: mean, multi-krum, flag) gives update = Σ weights[i]·updates[i];
`result.scores` is per-rule (Krum score, lower = central; Flag ‖Yᵀx_i‖², higher = consistent);
`result.objective` is Flag's objective history (starting value, then each accepted iteration).

Aggregators are frozen dataclasses without state: one instance may serve several threads. Inputs
may live on a GPU (all on the same device); the small p×p maths always runs on the CPU in fp64.
Cost: O(d·p) for mean, O(d·p²) for Multi-Krum and Flag (one Gram pass, one output pass), and
O(d·p·log²p) for the coordinate-wise rules (a sorting network); see benchmarks/aggregate.py.
"""

from peertrain.swarm.aggregation.base import AggregateResult, Aggregator
from peertrain.swarm.aggregation.coordinatewise import MedianAggregator, TrimmedMeanAggregator
from peertrain.swarm.aggregation.errors import (
    AggregationError,
    AggregatorConfigError,
    NotEnoughUpdates,
)
from peertrain.swarm.aggregation.flag import FlagAggregator
from peertrain.swarm.aggregation.krum import MultiKrumAggregator
from peertrain.swarm.aggregation.mean import MeanAggregator
from peertrain.swarm.aggregation.registry import (
    AGGREGATORS,
    aggregator_options,
    build_aggregator,
)
from peertrain.swarm.aggregation.streaming import DEFAULT_CHUNK_SIZE, TensorSource, UpdateSource
from peertrain.swarm.aggregation.validation import RejectReason, Verdict

__all__ = [
    "AGGREGATORS",
    "DEFAULT_CHUNK_SIZE",
    "AggregateResult",
    "AggregationError",
    "Aggregator",
    "AggregatorConfigError",
    "FlagAggregator",
    "MeanAggregator",
    "MedianAggregator",
    "MultiKrumAggregator",
    "NotEnoughUpdates",
    "RejectReason",
    "TensorSource",
    "TrimmedMeanAggregator",
    "UpdateSource",
    "Verdict",
    "aggregator_options",
    "build_aggregator",
]
