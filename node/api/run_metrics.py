"""The per-run series of /metrics (node/api/metrics.py): one set per run this node is in.

Every series is labelled `run` by the run's ID: a name can be given to several runs by anyone
(run_lookup.py refuses to guess among them), so a name label could merge two runs' counters
into one series. `peertrain_run_info` (always 1) carries the name beside the ID, with the mode
and, in a diffusion run, this member's expert group, for dashboards to join on. A run reports
what its mode has: DiLoCo and diffusion runs their rounds, update bytes, re-syncs, rejections
and end; a swarm pipeline its round and members.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..net import slim_imports

slim_imports.release("prometheus_client")  # before the import below, as in metrics.py

from prometheus_client.core import (  # noqa: E402 - only once the guard has let it in
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .history import StatusHistory, runs_of  # noqa: E402

DROPPED_KINDS = ("deltas", "announcements", "records")  # every mode's (a pipeline's: stage_calls)

# key: (family, name, help, labels after "run"); _add_run fills them
RUN_FAMILIES: dict[
    str, tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, tuple[str, ...]]
] = {
    "info": (
        GaugeMetricFamily,
        "peertrain_run_info",
        "1 for each run this node is in: its name, mode and this member's expert group",
        ("run_name", "mode", "group"),
    ),
    "round": (GaugeMetricFamily, "peertrain_run_round", "the run's current round", ()),
    "rounds": (
        CounterMetricFamily,
        "peertrain_run_rounds_completed",
        "rounds this node completed",
        (),
    ),
    "members": (GaugeMetricFamily, "peertrain_run_members", "live members", ()),
    "loss": (GaugeMetricFamily, "peertrain_run_loss", "eval loss after the last round", ()),
    "bytes": (
        CounterMetricFamily,
        "peertrain_run_update_bytes",
        "outer-update bytes published (out) and fetched (in)",
        ("direction",),
    ),
    "resyncs": (
        CounterMetricFamily,
        "peertrain_run_resyncs",
        "states downloaded to adopt the majority's (re-syncs and catch-ups)",
        (),
    ),
    "rejected": (
        CounterMetricFamily,
        "peertrain_run_rejected_updates",
        "peers' updates refused, by reason",
        ("reason",),
    ),
    "finished": (GaugeMetricFamily, "peertrain_run_finished", "1 once the run ended", ()),
    "counted": (
        GaugeMetricFamily,
        "peertrain_run_counted_members",
        "members the run counts and (contribution scores) rates on probation, by set",
        ("set",),
    ),
    "rating": (
        GaugeMetricFamily,
        "peertrain_run_member_rating",
        "a member's contribution score as the run's scorers rate it (--set scoring=anchors)",
        ("peer",),
    ),
    "dropped": (
        CounterMetricFamily,
        "peertrain_run_dropped",
        "non-members' traffic an invite run dropped before storing or downloading it, by kind",
        ("kind",),
    ),
}
DURATION = (
    "peertrain_run_round_duration_seconds",
    "wall time of the run's rounds, seen from this node (to a second)",
)


def run_metrics(status: Mapping[str, Any], history: StatusHistory) -> Iterator[Metric]:
    """One series per run this node is in, labelled by the run's ID (a handful at most)."""
    families: dict[str, Any] = {
        key: kind(name, doc, labels=["run", *labels])
        for key, (kind, name, doc, labels) in RUN_FAMILIES.items()
    }
    families["duration"] = HistogramMetricFamily(*DURATION, labels=["run"])
    for run in runs_of(status):
        _add_run(families, run, history)
    yield from families.values()


def _add_run(families: dict[str, Any], run: Mapping[str, Any], history: StatusHistory) -> None:
    rid = run["run_id"]
    group = run.get("group") or ""
    families["info"].add_metric([rid, run["name"], run["mode"], group], 1)
    families["round"].add_metric([rid], run["round"])
    families["members"].add_metric([rid], len(run["members"]))
    if run["loss"] is not None:
        families["loss"].add_metric([rid], run["loss"])
    if (times := history.round_times(rid)) is not None:
        families["duration"].add_metric([rid], times.cumulative(), times.sum)
    dropped = {**dict.fromkeys(DROPPED_KINDS, 0), **run.get("dropped", {})}
    for kind, count in sorted(dropped.items()):
        families["dropped"].add_metric([rid, kind], count)
    _add_rounds(families, rid, run)
    if scores := (run.get("progress") or {}).get("scores"):
        families["counted"].add_metric([rid, "counted"], len(scores["counted"]))
        families["counted"].add_metric([rid, "probation"], len(scores["probation"]))
        for peer, rating in sorted(scores["ratings"].items()):  # at most 160 (crdt/scorecard)
            families["rating"].add_metric([rid, peer], rating["rating"])


def _add_rounds(families: dict[str, Any], rid: str, run: Mapping[str, Any]) -> None:
    """What a run of rounds and updates reports (DiLoCo and diffusion; a pipeline has none)."""
    if "rounds_completed" in run:
        families["rounds"].add_metric([rid], run["rounds_completed"])
    if "bytes_published" in run:
        families["bytes"].add_metric([rid, "out"], run["bytes_published"])
        families["bytes"].add_metric([rid, "in"], run["bytes_fetched"])
    if "resyncs" in run:
        families["resyncs"].add_metric([rid], run["resyncs"])
    for reason, count in sorted(run.get("rejected_by_reason", {}).items()):
        families["rejected"].add_metric([rid, reason], count)
    if "finished" in run:
        families["finished"].add_metric([rid], float(run["finished"]))
