"""Prometheus /metrics of a node in a 3-node DiLoCo run, read by prometheus_client's own parser."""

from __future__ import annotations

import json
import re
import urllib.request

import trio
from peertrain.testing import free_tcp_port, open_test_swarm, scrape_metrics, wait_until

SPEC = dict(
    model="mlp",
    dataset="digits",
    inner_steps=20,
    batch_size=32,
    lr=3e-3,
    warmup_steps=2,
    rounds=8,
    round_timeout=20,
    codec="int8",
    min_members=3,
)
PEER_ID_LIKE = re.compile(r"(Qm|12D3Koo)[1-9A-HJ-NP-Za-km-z]{20,}")


def fetch(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers["Content-Type"], response.read()


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by (name, sorted labels), parsed by prometheus_client."""
    return await trio.to_thread.run_sync(scrape_metrics, port)


async def test_metrics_follow_a_three_node_run_without_peer_ids_in_labels():
    port = free_tcp_port()
    async with open_test_swarm(3, first={"metrics_listen": f"127.0.0.1:{port}"}) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes), timeout=20)
        session = await nodes[0].runs.create(name="digits", mode="diloco", spec=SPEC)
        run_label = (("run", session.run_id),)  # by ID: a name may be any run's
        for node in nodes[1:]:
            await node.runs.join("digits", timeout=20)
        rounds_seen, byte_checks = [], 0
        with trio.fail_after(180):
            while not nodes[0].status()["run"]["finished"]:
                before = nodes[0].status()["run"]
                samples = await scrape(port)
                after = nodes[0].status()["run"]
                byte_checks += check_bytes(samples, before, after, run_label)
                rounds_seen.append(samples[("peertrain_run_rounds_completed_total", run_label)])
                await trio.sleep(0.5)
        samples = await scrape(port)
        final = nodes[0].status()
        api = await api_status_at_round(port, final["run"]["run_id"], 8)
        peer_ids = [n.status()["peer_id"] for n in nodes]

    assert rounds_seen == sorted(rounds_seen), "the round counter never goes back"
    assert samples[("peertrain_run_rounds_completed_total", run_label)] == 8 > rounds_seen[0]
    assert samples[("peertrain_run_round", run_label)] == final["run"]["round"] == 8
    assert samples[("peertrain_run_members", run_label)] == 3
    assert samples[("peertrain_run_loss", run_label)] == final["run"]["loss"]
    info = (("group", ""), ("mode", "diloco"), *run_label, ("run_name", "digits"))
    assert samples[("peertrain_run_info", info)] == 1
    assert samples[("peertrain_peers", (("kind", "direct"),))] == 2
    # an open run drops nothing unseen; the invite run's drops: tests/e2e/test_sybil_runs_cli.py
    assert final["run"]["dropped"]["deltas"] == 0
    assert samples[("peertrain_run_dropped_total", (("kind", "deltas"),) + run_label)] == 0
    assert byte_checks > 0
    assert (
        samples[("peertrain_run_update_bytes_total", (("direction", "out"),) + run_label)]
        == (final["run"]["bytes_published"])
    )
    assert (
        samples[("peertrain_run_update_bytes_total", (("direction", "in"),) + run_label)]
        == (final["run"]["bytes_fetched"])
    )
    assert final["run"]["bytes_fetched"] > 0 and final["run"]["bytes_published"] > 0
    check_bytes_against_the_report(samples, final["run"], api, run_label)
    labels = {value for _, pairs in samples for _, value in pairs}
    # no label holds an ID or a piece of one long enough to name a peer (a word such as "peer"
    # or "in" occurs inside a random base58 ID: "in", a direction, is in one of three IDs in ~4%
    # of runs)
    assert not [v for v in labels if any(p in v or (len(v) >= 8 and v in p) for p in peer_ids)]
    assert not [v for v in labels if PEER_ID_LIKE.search(v)]


def check_bytes(samples, before, after, run_label) -> int:
    """Scraped byte counters lie between the status read just before and just after."""
    checked = 0
    for direction, key in (("out", "bytes_published"), ("in", "bytes_fetched")):
        scraped = samples.get(
            ("peertrain_run_update_bytes_total", (("direction", direction),) + run_label)
        )
        if scraped is None:  # the run's driver is still starting
            continue
        assert before[key] <= scraped <= after[key]
        checked += 1
    return checked


async def api_status_at_round(port: int, run_id: str, round_: int) -> dict:
    """/api/status once its history (sampled once a second) has seen `round_` of the run."""
    with trio.fail_after(15):
        while True:
            _, page = await trio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/api/status")
            api = json.loads(page)
            samples = api["history"]["runs"].get(run_id) or [{"round": -1}]
            if samples[-1]["round"] >= round_:
                return api
            await trio.sleep(0.3)


def check_bytes_against_the_report(samples, run, api, run_label) -> None:
    """The byte counters are the run's own figures: each round this node sent one update of
    the int8 codec's size for the run's parameters and fetched whole updates only, and the
    dashboard's traffic per round (history) ends at the same total sent."""
    from peertrain.swarm.exchange.codec import ProtocolCodec

    sent = samples[("peertrain_run_update_bytes_total", (("direction", "out"),) + run_label)]
    got = samples[("peertrain_run_update_bytes_total", (("direction", "in"),) + run_label)]
    update = ProtocolCodec("int8").payload_bytes(run["params"])
    assert sent == update * run["rounds_completed"] == update * 8
    assert got % update == 0 and got > 0
    last = api["history"]["runs"][run["run_id"]][-1]
    assert last["round"] == 8 and last["bytes_published"] == sent
    assert 0 < last["bytes_fetched"] <= got  # a late copy may still arrive after the round


async def test_api_status_is_the_status_without_local_paths_with_a_history_and_404s():
    port = free_tcp_port()
    async with open_test_swarm(2, first={"metrics_listen": f"127.0.0.1:{port}"}) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 1 for n in nodes), timeout=20)
        await trio.sleep(1.5)  # a second sample: the peer's arrival is an event by then
        _, body = await trio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/api/status")
        status = nodes[0].status()
        page_type, page = await trio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/")
        missing = await trio.to_thread.run_sync(status_of, f"http://127.0.0.1:{port}/nope")
    api = json.loads(body)
    # anyone who reaches the port reads it: not the home path nor the pid
    assert set(api) == set(status) - {"home", "pid"} | {"history"}
    assert status["home"] not in body.decode()
    assert api["peer_id"] == status["peer_id"] and api["peers"] == status["peers"]
    assert page_type.startswith("text/html") and b"/app.js" in page
    assert missing == 404


def status_of(url: str) -> int:
    import urllib.error

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
