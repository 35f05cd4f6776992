"""The node's small HTTP server (node/api/http.py), the dashboard's history (node/api/history.py)
and the `metrics_listen` option."""

from __future__ import annotations

import pytest
import trio
from peertrain.node.api.history import MAX_EVENTS, MAX_SAMPLES, StatusHistory
from peertrain.node.api.http import MAX_HEAD_BYTES, HttpResponse, HttpServer
from peertrain.node.config import host_and_port, load_config
from peertrain.node.errors import NodeConfigError


async def ask(port: int, raw: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
    return answer


@pytest.fixture
async def port(nursery):
    routes = {"/hello": lambda: HttpResponse(200, b"hi\n"), "/bug": lambda: 1 / 0}
    _, bound = await nursery.start(HttpServer(routes, "127.0.0.1", 0, read_timeout=0.5).run)
    return bound


async def test_a_get_is_answered_once_and_the_connection_closed(port):
    answer = await ask(port, b"GET /hello?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in head
    assert b"Content-Length: 3" in head and body == b"hi\n"


async def test_head_has_no_body_and_other_methods_and_paths_are_refused(port):
    assert (await ask(port, b"HEAD /hello HTTP/1.1\r\n\r\n")).endswith(b"\r\n\r\n")
    assert (await ask(port, b"POST /hello HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
    assert (await ask(port, b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
    assert (await ask(port, b"GARBAGE\r\n\r\n")).startswith(b"HTTP/1.1 400")


async def test_a_failing_page_is_a_500_and_the_server_keeps_serving(port):
    assert (await ask(port, b"GET /bug HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 500")
    assert (await ask(port, b"GET /hello HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")


async def test_an_endless_head_is_cut_off_and_a_silent_client_timed_out(port):
    answer = await ask(port, b"GET /hello HTTP/1.1\r\n" + b"X: y\r\n" * MAX_HEAD_BYTES)
    assert answer.startswith(b"HTTP/1.1 400") and b"request head over" in answer
    with trio.fail_after(5):  # the server's 0.5 s read deadline closes it, not our patience
        assert await ask(port, b"GET /hel") == b""


def run_status(round_: int, loss: float | None, members: list[str], **extra) -> dict:
    run = {"run_id": "r1", "name": "demo", "round": round_, "loss": loss, "members": members}
    run.update(bytes_published=100 * round_, bytes_fetched=200 * round_, resyncs=0)
    run.update(rejected_updates=0, error=None, **extra)
    return {"peer_id": "QmSelf", "name": "me", "peers": members, "peer_names": {}, "run": run}


def test_history_keeps_a_sample_per_round_and_the_changes_as_events():
    clock = iter(range(100)).__next__
    history = StatusHistory(clock=clock)
    history.observe(run_status(0, None, ["QmSelf"]))
    history.observe(run_status(0, 2.5, ["QmSelf", "QmOther1"]))  # the loss of round 0 arrived
    history.observe(run_status(1, 2.0, ["QmSelf", "QmOther1"], resyncs=1))
    samples = history.samples("r1")
    assert [(s.round, s.loss) for s in samples] == [(0, 2.5), (1, 2.0)]
    assert history.last_round_seconds("r1") == samples[1].time - samples[0].time
    kinds = [e.kind for e in history.events()]
    assert kinds == ["peer-joined", "member-joined", "round", "resync"]
    assert "QmOther1"[-8:] in history.events()[0].text


def test_history_is_bounded_however_long_the_node_lives():
    history = StatusHistory()
    for round_ in range(MAX_SAMPLES + 50):
        members = ["QmSelf", f"QmPeer{round_}"]  # a member comes and goes every round
        history.observe(run_status(round_, 1.0 / (round_ + 1), members))
    assert len(history.samples("r1")) == MAX_SAMPLES
    assert len(history.events()) == MAX_EVENTS


def test_metrics_listen_is_host_and_port_from_flag_env_or_file(tmp_path, monkeypatch):
    assert host_and_port("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert host_and_port("[::1]:0") == ("::1", 0)
    assert load_config(tmp_path).metrics_listen is None  # off by default
    monkeypatch.setenv("PEERTRAIN_METRICS_LISTEN", "127.0.0.1:9000")
    assert load_config(tmp_path).metrics_listen == "127.0.0.1:9000"
    for bad in ("9464", "localhost:http", ":9464", "127.0.0.1:70000"):
        with pytest.raises(NodeConfigError, match="metrics_listen"):
            load_config(tmp_path, {"metrics_listen": bad})


async def test_a_page_that_rebound_its_own_name_to_loopback_is_refused(nursery):
    """DNS rebinding: a web page whose name now resolves to 127.0.0.1 reaches the dashboard with
    its own name in `Host`. Only `localhost`, IP literals and the owner's names are answered."""
    routes = {"/hello": lambda: HttpResponse(200, b"hi\n")}
    server = HttpServer(routes, "127.0.0.1", 0, allowed_hosts=["mybox.lan"])
    _, bound = await nursery.start(server.run)
    for host, status in [
        (b"evil.example:9464", b"403"),
        (b"EVIL.example", b"403"),
        (b"localhost:9464", b"200"),
        (b"127.0.0.1:9464", b"200"),
        (b"[::1]:9464", b"200"),
        (b"192.0.2.7", b"200"),
        (b"mybox.lan:9464", b"200"),
    ]:
        answer = await ask(bound, b"GET /hello HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 " + status), (host, answer[:80])
    refused = await ask(bound, b"GET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert b"dashboard_hosts" in refused


async def test_idle_sockets_holding_every_slot_do_not_lock_the_owner_out(nursery):
    """More idle connections than slots, none sending a head: the owner's request is answered
    at once (the longest-waiting idle one gives up its slot), not after their read deadline."""
    routes = {"/hello": lambda: HttpResponse(200, b"hi\n")}
    server = HttpServer(routes, "127.0.0.1", 0, max_connections=16, read_timeout=10.0)
    _, bound = await nursery.start(server.run)
    idle = [await trio.open_tcp_stream("127.0.0.1", bound) for _ in range(40)]
    await trio.sleep(0.2)
    with trio.fail_after(2):
        answer = await ask(bound, b"GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")
    for stream in idle:
        await stream.aclose()
