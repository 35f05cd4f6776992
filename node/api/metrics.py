"""Prometheus metrics of a daemon, read from its status and statistics at scrape time.

A custom Collector rather than counters incremented through the code: every figure already
exists as a counter or gauge in some service's `statistics()` or in `status()`, so a scrape
turns one snapshot into metric families and nothing in the node pays for metrics it does not
serve. Names carry units and counters end in `_total`; labels come from fixed sets (a kind, a
reason code, a service name, a run's ID): never a peer ID, which would make one series per
stranger. A run is labelled by its ID, which names one run, not by its name, which anyone may
give another run; `peertrain_run_info` maps the ID to the name, mode and (diffusion) group.
A counter of a fixed label set has a series for every label from the start, zeros included, so
a dashboard tells "none yet" from "not exported". The process's own figures (CPU seconds,
resident memory, open files: `process_*`) come from prometheus_client's ProcessCollector.

prometheus_client is imported only by this module, which node/api/web.py imports only when
`metrics_listen` is set: the idle daemon keeps it out of memory (node/net/slim_imports.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..net import slim_imports

slim_imports.release("prometheus_client")  # before the import below: the guard must let it in

from peertrain.dht.errors import RejectReason  # noqa: E402
from prometheus_client.core import (  # noqa: E402 - only once the guard has let it in
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest  # noqa: E402
from prometheus_client.process_collector import ProcessCollector  # noqa: E402
from prometheus_client.registry import Collector, CollectorRegistry  # noqa: E402

from .history import StatusHistory  # noqa: E402
from .run_metrics import run_metrics  # noqa: E402

if TYPE_CHECKING:
    from .readings import NodeReadings

CONTENT_TYPE = CONTENT_TYPE_LATEST
REACHABILITY_STATES = ("public", "private", "unknown")
PEER_KINDS = ("direct", "relayed")
DHT_REJECTIONS = tuple(r.code for r in RejectReason)


class DaemonCollector(Collector):
    """Metric families of one daemon; `collect()` reads its status once per scrape."""

    def __init__(self, node: NodeReadings, history: StatusHistory) -> None:
        self.node = node
        self.history = history

    def collect(self) -> Iterator[Metric]:
        status: Mapping[str, Any] = self.node.status()
        yield from node_metrics(status)
        yield from network_metrics(status)
        yield from service_metrics(self.node)
        yield from budget_metrics(status["budget"])
        yield from run_metrics(status, self.history)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def registry_for(node: NodeReadings, history: StatusHistory) -> CollectorRegistry:
    """A registry of this node alone (not the process-wide default: tests run several)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(node, history))
    ProcessCollector(registry=registry)  # process_*: this daemon's CPU, memory, open files
    return registry


def gauge(name: str, doc: str, value: float, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def labelled(
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    doc: str,
    label: str,
    values: Mapping[str, float],
) -> Metric:
    family = kind(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([str(key)], value)
    return family


def node_metrics(status: Mapping[str, Any]) -> Iterator[Metric]:
    yield gauge("peertrain_build_info", "peertrain version", 1, version=status["version"])
    yield gauge("peertrain_uptime_seconds", "seconds since the daemon served", status["uptime_s"])
    kinds = dict.fromkeys(PEER_KINDS, 0)
    for kind in status["reachability"].get("connections", {}).values():
        kinds[kind] = kinds.get(kind, 0) + 1
    yield labelled(GaugeMetricFamily, "peertrain_peers", "connected peers by kind", "kind", kinds)
    state = status["reachability"]["status"]
    states = {s: float(s == state) for s in REACHABILITY_STATES}
    yield labelled(
        GaugeMetricFamily, "peertrain_reachability", "1 for the current verdict", "state", states
    )


def network_metrics(status: Mapping[str, Any]) -> Iterator[Metric]:
    reach, dht = status["reachability"], status["dht"]
    yield gauge(
        "peertrain_relay_reservations", "relays holding a slot for us", len(reach["relays"])
    )
    yield counter("peertrain_relay_reservations_lost", "relay slots lost", reach["relays_lost"])
    yield counter("peertrain_relayed_bytes", "bytes relayed for others", reach["relayed_bytes"])
    yield gauge(
        "peertrain_dht_routing_table_peers", "peers in the routing table", dht["routing"]["peers"]
    )
    yield gauge("peertrain_dht_records", "records stored for the DHT", dht["storage"]["entries"])
    yield gauge("peertrain_dht_records_bytes", "bytes of stored records", dht["storage"]["bytes"])
    yield gauge("peertrain_dht_bootstrapped", "1 once bootstrapped", float(dht["bootstrapped"]))
    requests = {"lookup": dht["lookups"], "put": dht["puts"], "get": dht["gets"]}
    yield labelled(
        CounterMetricFamily,
        "peertrain_dht_requests",
        "DHT operations started here",
        "operation",
        requests,
    )
    yield counter("peertrain_dht_requests_answered", "DHT requests served", dht["answered"])
    yield labelled(
        CounterMetricFamily,
        "peertrain_dht_rejected_inputs",
        "records and answers refused, by reason code",
        "reason",
        {**dict.fromkeys(DHT_REJECTIONS, 0), **dht["rejected"]},
    )
    shield = status["shield"]
    yield counter(
        "peertrain_inbound_streams_refused_banned",
        "streams of banned peers reset",
        shield["refused_banned"],
    )
    faults = {"peer": shield["peer_faults"], "handler": shield["handler_bugs"]}
    yield labelled(
        CounterMetricFamily,
        "peertrain_inbound_stream_failures",
        "inbound streams that failed, by whose fault",
        "cause",
        faults,
    )


def service_metrics(node: NodeReadings) -> Iterator[Metric]:
    gossip = node.gossip.statistics()
    messages = {
        "published": gossip.published,
        "delivered": gossip.delivered,
        "dropped_slow_consumer": gossip.dropped_slow_consumer,
        "dropped_by_libp2p": gossip.dropped_by_libp2p,
        "rejected": gossip.rejected,
        "ignored": gossip.ignored,
    }
    yield labelled(
        CounterMetricFamily,
        "peertrain_gossip_messages",
        "gossip messages by outcome",
        "outcome",
        messages,
    )
    yield gauge("peertrain_gossip_topics", "gossip topics subscribed", gossip.topics)
    scores = node.scoreboard.statistics()
    yield counter("peertrain_penalties", "penalties given to misbehaving peers", scores.penalties)
    yield gauge("peertrain_peers_banned", "peers banned now", scores.banned)
    yield gauge("peertrain_peers_scored", "peers with a penalty score", scores.tracked)
    store = node.tensor_store.statistics()
    yield gauge("peertrain_tensor_store_bytes", "bytes of tensors served to peers", store.bytes)
    yield gauge("peertrain_tensor_store_tensors", "tensors served to peers", store.tensors)
    health = node.supervisor.status()
    restarts = {s["name"]: s["restarts"] for s in health}
    yield labelled(
        CounterMetricFamily,
        "peertrain_service_restarts",
        "restarts of each supervised service",
        "service",
        restarts,
    )
    running = {s["name"]: float(s["state"] == "running") for s in health}
    yield labelled(
        GaugeMetricFamily,
        "peertrain_service_running",
        "1 while the service runs",
        "service",
        running,
    )


def budget_metrics(budget: Mapping[str, Any]) -> Iterator[Metric]:
    yield labelled(
        GaugeMetricFamily,
        "peertrain_budget_limit",
        "each resource budget limit",
        "limit",
        budget["limits"],
    )
    yield gauge(
        "peertrain_budget_receive_memory_bytes",
        "bytes reserved by downloads in flight",
        budget["receive_memory"],
    )
    yield gauge(
        "peertrain_budget_connections",
        "open connections, all peers",
        budget["connections"].get("total", 0),
    )
    yield labelled(
        CounterMetricFamily,
        "peertrain_budget_refused",
        "refusals by the limit hit",
        "limit",
        {**dict.fromkeys(budget["limits"], 0), **budget["refused"]},  # refusals name limits
    )
