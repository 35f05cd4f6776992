"""The import guard of node/net/slim_imports.py: placeholders that let libp2p import, fail loudly
when used, and leave every libp2p feature peertrain needs working.

The guard is process-wide, so anything involving the real libp2p runs in a fresh process:
`python tests/node/test_slim_imports.py probe` runs `probe()` below with the guard on.
Nothing at the top of this file may import libp2p.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from peertrain.node.errors import NodeError
from peertrain.node.net import slim_imports
from peertrain.node.net.slim_imports import SlimmedDependencyUsed

ABSENT = "peertrain_slim_probe_pkg"  # a package that exists nowhere


@pytest.fixture(autouse=True)
def guard_enabled(monkeypatch):
    """Tests of the guard itself: a PEERTRAIN_FULL_IMPORTS=1 in the environment must not leak in."""
    monkeypatch.delenv(slim_imports.DISABLE_ENV, raising=False)


@contextlib.contextmanager
def guard(packages: list[str]) -> Iterator[slim_imports.SlimFinder]:
    finder = slim_imports.install(packages)
    assert finder is not None
    try:
        yield finder
    finally:
        slim_imports.uninstall(finder)


def test_placeholders_import_and_behave_like_classes_until_used():
    with guard([ABSENT]):
        import peertrain_slim_probe_pkg.deep.module as module  # type: ignore[import-not-found]
        from peertrain_slim_probe_pkg.quic.connection import Connection, Events  # type: ignore[import-not-found]

        class Server(Connection):
            limit = 3

        assert Server.limit == 3 and module.Anything is module.Anything
        assert isinstance(Events.DATA.kind, type) and Connection[int] is Connection
        assert (Connection | None) is not None and not isinstance(1, Connection)
        assert slim_imports.is_placeholder(module) and slim_imports.is_placeholder(Server)
    assert ABSENT not in sys.modules


def test_calling_a_placeholder_fails_loudly_with_package_and_remedy(caplog):
    before = len(slim_imports.uses())
    with guard([ABSENT]):
        from peertrain_slim_probe_pkg import Zeroconf  # type: ignore[import-not-found]

        class Listener(Zeroconf):
            pass

        with pytest.raises(SlimmedDependencyUsed) as direct:
            Zeroconf(interfaces=["lo"])
        with pytest.raises(SlimmedDependencyUsed) as subclass:
            Listener()
    message = str(direct.value)
    assert f"{ABSENT}.Zeroconf" in message and slim_imports.DISABLE_ENV + "=1" in message
    assert "a subclass of peertrain_slim_probe_pkg.Zeroconf" in str(subclass.value)
    assert isinstance(direct.value, ImportError) and isinstance(direct.value, NodeError)
    listener = f"{__name__}.{Listener.__qualname__} (a subclass of {ABSENT}.Zeroconf)"
    assert slim_imports.uses()[before:] == [f"{ABSENT}.Zeroconf", listener]
    levels = [r.levelno for r in caplog.records if r.name == slim_imports.__name__]
    assert levels == [logging.ERROR] * 2


def test_packages_already_imported_keep_their_real_modules():
    import json.decoder

    with guard(["json", ABSENT]) as finder:
        import json.scanner

        assert finder.packages == {ABSENT}
        assert json.scanner.make_scanner and not slim_imports.is_placeholder(json.scanner)


def test_a_released_package_loads_for_real_from_then_on():
    with guard([ABSENT, "peertrain_slim_other_pkg"]) as finder:
        import peertrain_slim_probe_pkg.sub  # type: ignore[import-not-found]  # noqa: F401

        slim_imports.release(ABSENT)
        assert finder.packages == {"peertrain_slim_other_pkg"}
        assert not [name for name in sys.modules if name.startswith(ABSENT)]
        with pytest.raises(ModuleNotFoundError):  # the real lookup: it exists nowhere
            import peertrain_slim_probe_pkg  # type: ignore[import-not-found]  # noqa: F401


def test_the_metrics_module_gets_the_real_prometheus_client_in_a_slim_daemon():
    probe = (
        "from peertrain.node.net import slim_imports\n"
        "slim_imports.install()\n"
        "import peertrain.node.daemon, prometheus_client\n"
        "assert slim_imports.is_placeholder(prometheus_client)\n"
        "import peertrain.node.api.metrics, prometheus_client\n"
        "assert not slim_imports.is_placeholder(prometheus_client)\n"
        "from prometheus_client.core import GaugeMetricFamily\n"
        "GaugeMetricFamily('probe', 'works', value=1)\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=120)


def test_install_is_idempotent_and_the_env_var_turns_it_off(monkeypatch):
    with guard([ABSENT]) as finder:
        assert slim_imports.install() is finder and sys.meta_path.count(finder) == 1
    monkeypatch.setenv(slim_imports.DISABLE_ENV, "1")
    assert slim_imports.install() is None
    assert not any(isinstance(f, slim_imports.SlimFinder) for f in sys.meta_path)


def test_the_slimmed_list_was_verified_against_the_installed_libp2p():
    assert importlib.metadata.version("libp2p") == slim_imports.VERIFIED_LIBP2P, (
        "py-libp2p changed: re-check which modules import the SLIMMED packages and that "
        "test_libp2p_features_we_need_work_with_the_guard_on passes, then update VERIFIED_LIBP2P"
    )


def test_libp2p_features_we_need_work_with_the_guard_on():
    command = [sys.executable, __file__, "probe"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["real_modules"] == [] and out["placeholders"] >= len(slim_imports.SLIMMED)
    assert out["ping"] == 2 and out["identify"] is True
    assert out["gossipsub"] == "hello" and out["kad_dht"] == "v"
    assert out["relay_reservation"] is True and out["dcutr_running"] is True
    assert out["resource_manager"] is True and out["uses"] == []
    assert out["mdns_host"].startswith("SlimmedDependencyUsed: zeroconf.Zeroconf is not available")


@pytest.mark.slow
def test_cli_daemons_started_and_joined_run_without_the_slimmed_packages(tmp_path):
    from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
    from peertrain.testing import wait_until_sync

    first = DaemonProcess(tmp_path / "a", node_args()).start()
    daemons = [first]
    try:
        share = first.wait_ready()["share"]
        join_args = ["join", share, "--listen", "/ip4/127.0.0.1/tcp/0"]
        joiner = DaemonProcess(tmp_path / "b", join_args).start()
        daemons.append(joiner)
        joined = joiner.wait_ready()["peer_id"]
        wait_until_sync(lambda: first.status()["peers"] == [joined], timeout=10)
        for daemon in daemons:
            assert daemon.process is not None
            maps = Path(f"/proc/{daemon.process.pid}/maps").read_text()
            # each of these packages maps a compiled extension as soon as it is really imported
            loaded = [p for p in ("aioquic", "zeroconf", "charset_normalizer") if f"/{p}/" in maps]
            assert loaded == [], daemon.args[0]
    finally:
        assert stop_all(daemons) == [0] * len(daemons)


def probe() -> dict[str, object]:
    """Run in a fresh process: the guard on, then every libp2p feature peertrain needs."""
    slim_imports.install()
    import trio

    out: dict[str, object] = trio.run(_exercise_features)
    out["uses"] = slim_imports.uses()
    out["mdns_host"] = _mdns_host_error()
    out["placeholders"] = sum(slim_imports.is_placeholder(m) for m in sys.modules.values())
    out["real_modules"] = sorted(
        name
        for name, module in sys.modules.items()
        if name.partition(".")[0] in slim_imports.SLIMMED
        and not slim_imports.is_placeholder(module)
    )
    return out


async def _exercise_features() -> dict[str, object]:
    """Two hosts with every upstream service peertrain mounts; what each feature answered."""
    import trio
    from libp2p.tools.anyio_service import background_trio_service
    from multiaddr import Multiaddr
    from peertrain.node.net.host import build_host
    from peertrain.node.net.identity import Identity

    a, b = build_host(Identity.generate()), build_host(Identity.generate())
    loopback = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
    async with a.run(loopback), b.run(loopback), trio.open_nursery() as nursery:
        services = _upstream_services(a, b)
        async with contextlib.AsyncExitStack() as stack:
            for service in services["all"]:
                await stack.enter_async_context(background_trio_service(service))
            for pubsub in services["pubsubs"]:
                await pubsub.wait_until_ready()
            with trio.fail_after(20):
                out = await _use_features(a, b, services, nursery)
            # libp2p builds its resource manager inside `except Exception`; a swallowed
            # placeholder failure would leave it None
            out["resource_manager"] = a.get_network()._resource_manager is not None  # type: ignore[attr-defined]
            nursery.cancel_scope.cancel()
    return out


def _upstream_services(a, b) -> dict[str, list]:
    """Gossipsub, Kad-DHT, circuit relay v2 (a serves the hop) and DCUtR on both hosts."""
    from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
    from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.records.validator import NamespacedValidator, Validator
    from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
    from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol

    class AnyValue(Validator):
        def validate(self, key: str, value: bytes) -> None:
            pass

        def select(self, key: str, values: list[bytes]) -> int:
            return 0

    routers = [
        GossipSub(
            protocols=[PROTOCOL_ID_V11],
            degree=1,
            degree_low=1,
            degree_high=2,
            heartbeat_interval=1,
        )
        for _ in (a, b)
    ]
    pubsubs = [Pubsub(host, router) for host, router in zip((a, b), routers, strict=True)]
    validator = NamespacedValidator({"probe": AnyValue()})
    dhts = [KadDHT(h, DHTMode.SERVER, validator=validator) for h in (a, b)]
    relay, relay_client = CircuitV2Protocol(a, allow_hop=True), CircuitV2Protocol(b)
    dcutrs = [DCUtRProtocol(h) for h in (a, b)]
    return {
        "all": [*pubsubs, *routers, *dhts, relay, relay_client, *dcutrs],
        "pubsubs": pubsubs,
        "dhts": dhts,
        "relay_client": [relay_client],
        "dcutrs": dcutrs,
    }


async def _use_features(a, b, services: dict[str, list], nursery) -> dict[str, object]:
    """b connects to a, pings, is identified, gets a gossip message, reads a DHT value and
    reserves a relay slot on a."""
    from libp2p.host.ping import ID as PING
    from libp2p.host.ping import PingService
    from libp2p.peer.peerinfo import PeerInfo
    from libp2p.relay.circuit_v2.config import RelayConfig
    from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
    from libp2p.relay.circuit_v2.transport import CircuitV2Transport
    from peertrain.testing import wait_until

    pubsubs, dhts = services["pubsubs"], services["dhts"]
    out: dict[str, object] = {}
    subscription = await pubsubs[1].subscribe("probe")
    await b.connect(PeerInfo(a.get_id(), a.get_addrs()))
    out["ping"] = len(await PingService(b).ping(a.get_id(), ping_amt=2))
    # identify runs by itself on connect and fills the peerstore
    await wait_until(lambda: PING in b.get_peerstore().get_protocols(a.get_id()))
    out["identify"] = True
    await wait_until(lambda: b.get_id() in pubsubs[0].peer_topics.get("probe", ()))
    await pubsubs[0].publish("probe", b"hello")
    out["gossipsub"] = (await subscription.get()).data.decode()
    await dhts[0].add_peer(b.get_id())
    await dhts[1].add_peer(a.get_id())
    await dhts[0].put_value("/probe/key", b"v")
    out["kad_dht"] = ((await dhts[1].get_value("/probe/key")) or b"").decode()
    transport = CircuitV2Transport(b, services["relay_client"][0], RelayConfig())
    stream = await b.new_stream(a.get_id(), [HOP])
    out["relay_reservation"] = await transport.reserve(stream, a.get_id(), nursery)
    out["dcutr_running"] = all(d.manager.is_running for d in services["dcutrs"])
    return out


def _mdns_host_error() -> str:
    from libp2p import new_host
    from libp2p.crypto.ed25519 import create_new_key_pair

    try:
        new_host(key_pair=create_new_key_pair(), enable_mDNS=True)
    except SlimmedDependencyUsed as exc:
        return f"{type(exc).__name__}: {exc}"
    return "constructed"


if __name__ == "__main__" and sys.argv[1:] == ["probe"]:
    logging.disable(logging.CRITICAL)  # libp2p logs expected stream resets at shutdown
    print(json.dumps(probe()))
