"""A node's Prometheus /metrics as prometheus_client's own parser reads it (sync: tests of
in-process nodes call it in a thread, CLI tests directly)."""

from __future__ import annotations

import urllib.request

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_metrics(port: int, host: str = "127.0.0.1") -> Samples:
    """Every sample of http://HOST:PORT/metrics, by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        content_type, body = response.headers["Content-Type"], response.read()
    assert content_type.startswith("text/plain"), content_type
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples
