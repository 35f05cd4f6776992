"""/metrics as `promtool check metrics` would read it: prometheus_client's own parser takes the
whole text, every family has HELP and a type, counters end in `_total`, the process collector's
`process_*` series are there, a round's duration is a histogram, zero counters have a series,
runs are labelled by ID (the name on one info series), and a diffusion run has its series too.

One in-process daemon (no run) whose status, as the collector reads it, carries a DiLoCo run and
a diffusion run made of their status keys (node/runs/status.py)."""

from __future__ import annotations

import re
from typing import Any

from peertrain.node.api import metrics
from peertrain.node.api.history import StatusHistory
from peertrain.swarm.diloco.group.progress import DriverProgress
from peertrain.testing import open_test_swarm
from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
DILOCO_ID, DIFFUSION_ID = "ab" * 32, "cd" * 32


def diloco_run(round_: int) -> dict[str, Any]:
    progress = DriverProgress()  # its rejection counters, zeros included
    return {
        "name": "shared-name",
        "run_id": DILOCO_ID,
        "mode": "diloco",
        "members": ["QmA", "QmB", "QmC"],
        "round": round_,
        "loss": 2.5,
        "dropped": {"deltas": 0},
        "rounds_completed": round_,
        "bytes_published": 1000 * round_,
        "bytes_fetched": 2000 * round_,
        "resyncs": 0,
        "rejected_by_reason": dict(progress.rejected_by_reason),
        "finished": False,
    }


def diffusion_run() -> dict[str, Any]:
    progress = DriverProgress()
    return {
        "name": "shared-name",  # anyone may give a second run the same name
        "run_id": DIFFUSION_ID,
        "mode": "diffusion",
        "members": ["QmA", "QmB"],
        "round": 4,
        "loss": None,
        "dropped": {"deltas": 0},
        "group": "expert-1",
        "bytes_published": 512,
        "bytes_fetched": 1024,
        "finished": True,
        "state_checksum": "00ff",
        "rounds_completed": 4,
        "resyncs": 1,
        "rejected_updates": 0,
        "rejected_by_reason": dict(progress.rejected_by_reason),
    }


class WithRuns:
    """A daemon's readings whose status holds the given runs."""

    def __init__(self, node, runs: list[dict[str, Any]]) -> None:
        self.node, self.runs = node, runs
        self.gossip, self.scoreboard = node.gossip, node.scoreboard
        self.tensor_store, self.supervisor = node.tensor_store, node.supervisor

    def status(self) -> dict[str, Any]:
        return {**self.node.status(), "run": {"runs": self.runs}}


async def test_metrics_pass_a_promtool_like_check_with_process_series_and_run_ids():
    now = [0.0]
    history = StatusHistory(clock=lambda: now[0])
    async with open_test_swarm(1) as (node,):
        for round_ in (0, 1, 2):  # a round every 7 s as the history sees it
            now[0] = 7.0 * round_
            history.observe({**node.status(), "run": diloco_run(round_)})
        readings = WithRuns(node, [diloco_run(2), diffusion_run()])
        text = metrics.render(metrics.registry_for(readings, history)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    check_like_promtool(text, families)
    assert {"process_cpu_seconds", "process_resident_memory_bytes"} <= set(families)
    assert families["process_cpu_seconds"].type == "counter"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values()
               for s in f.samples}  # fmt: skip
    # zero counters have a series: a rejection kind, a DHT refusal reason, a budget limit
    norm = (("reason", "norm"), ("run", DILOCO_ID))
    assert samples[("peertrain_run_rejected_updates_total", norm)] == 0
    assert samples[("peertrain_dht_rejected_inputs_total", (("reason", "bad-signature"),))] == 0
    assert samples[("peertrain_budget_refused_total", (("limit", "connections"),))] == 0
    assert samples[("peertrain_run_dropped_total", (("kind", "records"), ("run", DILOCO_ID)))] == 0
    # runs by ID; the name, mode and group on the info series
    run_labels = {s.labels.get("run") for f in families.values() for s in f.samples} - {None}
    assert run_labels == {DILOCO_ID, DIFFUSION_ID}
    info = {s.labels["run"]: s.labels for s in families["peertrain_run_info"].samples}
    assert info[DIFFUSION_ID] == {
        "run": DIFFUSION_ID,
        "run_name": "shared-name",
        "mode": "diffusion",
        "group": "expert-1",
    }
    assert info[DILOCO_ID]["mode"] == "diloco" and info[DILOCO_ID]["group"] == ""
    # the round's duration: a histogram of the two rounds the history saw, 7 s each
    duration = families["peertrain_run_round_duration_seconds"]
    assert duration.type == "histogram"
    run = (("run", DILOCO_ID),)
    assert samples[("peertrain_run_round_duration_seconds_count", run)] == 2
    assert samples[("peertrain_run_round_duration_seconds_sum", run)] == 14
    assert samples[("peertrain_run_round_duration_seconds_bucket", (("le", "5.0"),) + run)] == 0
    assert samples[("peertrain_run_round_duration_seconds_bucket", (("le", "10.0"),) + run)] == 2
    # a diffusion run has its rounds, update bytes, re-syncs and end
    diffusion = (("run", DIFFUSION_ID),)
    assert samples[("peertrain_run_rounds_completed_total", diffusion)] == 4
    assert samples[("peertrain_run_update_bytes_total", (("direction", "in"),) + diffusion)] == 1024
    assert samples[("peertrain_run_resyncs_total", diffusion)] == 1
    assert samples[("peertrain_run_finished", diffusion)] == 1


def check_like_promtool(text: str, families: dict) -> None:
    """What `promtool check metrics` refuses: a family without HELP or TYPE, an untyped one, a
    bad name, a counter sample not ending in `_total`, a sample given twice."""
    helped = set(re.findall(r"^# HELP (\S+) \S", text, re.M))
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert set(typed) <= helped, set(typed) - helped
    seen = set()
    for family in families.values():
        assert NAME.match(family.name) and family.documentation, family.name
        assert family.type in {"counter", "gauge", "histogram"}, (family.name, family.type)
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
    for name, kind in typed.items():
        if kind == "counter":
            assert name.endswith("_total"), name
