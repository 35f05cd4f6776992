"""Rules by name, for configs and the CLI: `build_aggregator("flag", r=4, max_norm_ratio=100)`."""

from __future__ import annotations

import dataclasses
from typing import Any

from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.aggregation.coordinatewise import MedianAggregator, TrimmedMeanAggregator
from peertrain.swarm.aggregation.errors import AggregatorConfigError
from peertrain.swarm.aggregation.flag import FlagAggregator
from peertrain.swarm.aggregation.krum import MultiKrumAggregator
from peertrain.swarm.aggregation.mean import MeanAggregator

AGGREGATORS: dict[str, type[Aggregator]] = {
    cls.name: cls
    for cls in (
        MeanAggregator,
        MedianAggregator,
        TrimmedMeanAggregator,
        MultiKrumAggregator,
        FlagAggregator,
    )
}


def aggregator_options(name: str) -> tuple[str, ...]:
    """The keyword options `build_aggregator(name, ...)` accepts."""
    return tuple(f.name for f in dataclasses.fields(_rule(name)) if f.init)


def build_aggregator(name: str, **options: Any) -> Aggregator:
    """The rule called `name` (see `AGGREGATORS`) configured with `options`."""
    cls = _rule(name)
    unknown = sorted(set(options) - set(aggregator_options(name)))
    if unknown:
        raise AggregatorConfigError(
            f"{name}: unknown option(s) {unknown}; it accepts {list(aggregator_options(name))}"
        )
    return cls(**options)


def _rule(name: str) -> type[Aggregator]:
    try:
        return AGGREGATORS[name]
    except KeyError:
        raise AggregatorConfigError(
            f"unknown aggregator {name!r}; choose one of {sorted(AGGREGATORS)}"
        ) from None
