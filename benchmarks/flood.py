"""A flood against one member of an honest DiLoCo run: does the run go on, and what does it cost?

    .venv/bin/python benchmarks/flood.py [--seconds 60] [--inner-steps 20]

Two runs of three daemon processes on loopback (digits, MLP, int8): one quiet, one while an
attacker in this process throws the whole toolkit (peertrain.testing.attacks and gossip_attacks:
garbage frames on every protocol, huge length prefixes, slowloris, stream floods, slow readers
of the tensor service, bulk junk as fast as the link takes, relay reservation floods and churn,
update-announcement floods, forged and future-dated CRDT stamps, a wave of fresh identities,
junk on the control socket) at member 1 for `--seconds`. Reported side by side: honest
rounds completed in the window (target: attacked ≥ 80% of quiet), the victim's peak RSS growth
(target ≤ 200 MiB) and open fds, crashes (target 0), honest peers penalised by the victim
(target 0: read from its log), and the attacker's bytes actually delivered per second.
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio
from peertrain.testing import DIGITS_MLP

ROOT = Path(__file__).resolve().parents[1]
TENSOR = "/peertrain/tensor/1.0.0"
RUN = [
    *DIGITS_MLP,
    "--lr",
    "0.001",
    "--min-members",
    "3",
    "--round-timeout",
    "10",
    "--set",
    "num_shards=3",
]


def _toolkit():
    from peertrain.testing import attacks

    return attacks


def start_group(base: Path, inner_steps: int):
    from peertrain.node.cli.local_swarm import DAEMON_ENV
    from peertrain.node.cli.processes import DaemonProcess, node_args

    first = DaemonProcess(base / "n0", node_args(), DAEMON_ENV).start()
    addr = first.wait_ready()["share"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "peertrain",
            "run",
            "create",
            "--home",
            str(first.home),
            "--name",
            "flood",
            "--inner-steps",
            str(inner_steps),
            *RUN,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    daemons = [first]
    for index in (1, 2):
        args = ["join", addr, "--run", "flood", "--listen", "/ip4/127.0.0.1/tcp/0"]
        member = DaemonProcess(base / f"n{index}", args, DAEMON_ENV).start()
        member.wait_ready()
        daemons.append(member)
    return daemons


def rounds(daemons) -> list[int]:
    out = []
    for d in daemons:
        try:
            out.append((d.status(timeout=5)["run"] or {}).get("round", 0))
        except Exception:  # noqa: BLE001 - a daemon that does not answer counts as no progress
            out.append(-1)
    return out


def wait_for_round(daemons, target: int, timeout: float) -> None:
    from peertrain.testing import wait_until_sync

    wait_until_sync(
        lambda: min(rounds(daemons)) >= target,
        timeout=timeout,
        interval=1,
        what=f"every daemon at round {target}",
    )


class VictimProbe:
    """Peak RSS and open fds of one daemon process, sampled while the window runs."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.rss0 = self.process.memory_info().rss
        self.peak_rss, self.peak_fds = self.rss0, self.process.num_fds()

    def sample(self) -> None:
        try:
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            self.peak_fds = max(self.peak_fds, self.process.num_fds())
        except psutil.NoSuchProcess:
            pass


def _attacks(protocols: list[str], run: dict) -> list:
    """Each attack of the toolkit as `attack(attacker, victim_id) -> AttackReport`."""
    from peertrain.protocol.tensor_transfer import TensorRangeRequest
    from peertrain.testing.gossip_attacks import gossip_attacker

    ask = TensorRangeRequest(checksum=bytes(32), first_chunk=0, count=64)

    async def announcements(a, v):
        async with gossip_attacker(a, run["run_id"], settle=1.0) as forger:
            return await forger.announcement_flood(run["run_id"], round_=run["round"], seconds=3)

    async def stamps(a, v):
        async with gossip_attacker(a, run["run_id"], settle=1.0) as forger:
            return await forger.stamp_forgeries(run["run_id"], run["peer_id"], seconds=3)

    return [
        lambda a, v: a.bulk_junk(v, protocols[0], streams=4, seconds=3),
        lambda a, v: a.garbage_streams(v, protocols, seconds=3),
        lambda a, v: a.huge_length_prefixes(v, protocols, seconds=2),
        lambda a, v: a.stream_flood(v, protocols[1], streams=100, seconds=2),
        lambda a, v: a.slowloris(v, protocols[1], streams=16, seconds=2),
        lambda a, v: a.slow_reader(v, TENSOR, ask, streams=8, rate=1.1e6, seconds=2),
        lambda a, v: a.relay_reservation_flood(v, reservations=100, seconds=2),
        announcements,
        stamps,
    ]


async def attack(
    victim_addr: str, protocols: list[str], seconds: float, run: dict
) -> dict[str, int]:
    """The toolkit in a loop until `seconds` pass, each attack from a fresh identity (peer IDs are
    free: a ban costs the attacker one key pair). Bytes the victim accepted, per attack."""
    toolkit = _toolkit()
    delivered: dict[str, int] = {}
    deadline = trio.current_time() + seconds
    seed = 0
    while trio.current_time() < deadline:
        for run_attack in _attacks(protocols, run):
            seed += 1
            async with toolkit.Attacker.open(seed=seed) as attacker:
                try:
                    victim = await attacker.connect(victim_addr)
                except Exception:  # noqa: BLE001 - refused at connect: the next key pair tries
                    continue
                report = await run_attack(attacker, victim)
                delivered[report.name] = delivered.get(report.name, 0) + report.bytes_delivered
        async with toolkit.Attacker.open(seed=10_000 + seed) as sybils:
            for report in (
                await sybils.connection_flood(victim_addr, identities=20, seconds=2),
                await sybils.relay_reservation_churn(victim_addr, identities=10, seconds=2),
            ):
                delivered[report.name] = delivered.get(report.name, 0) + report.bytes_delivered
        delivered["control junk"] = delivered.get("control junk", 0) + await _control_junk(run)
    return delivered


async def _control_junk(run: dict) -> int:
    """The owner's own shell gone wrong: every junk line of the toolkit on the control socket."""
    sent = 0
    for line in _toolkit().control_junk():
        with trio.move_on_after(5):
            stream = await trio.open_unix_socket(run["control"])
            async with stream:
                await stream.send_all(line)
                sent += len(line)
                await stream.receive_some(1 << 16)
    return sent


def measure(base: Path, args, *, attacked: bool) -> dict:
    from peertrain.node.cli.processes import stop_all

    daemons = start_group(base, args.inner_steps)
    try:
        wait_for_round(daemons, 1, timeout=180)
        victim = daemons[1]
        probe = VictimProbe(victim.process.pid)
        honest = {d.status()["peer_id"] for d in daemons}
        start_rounds = rounds(daemons)
        started = time.monotonic()
        delivered: dict[str, int] = {}
        if attacked:
            status = victim.status()
            addr = status["share"]
            run = {
                "run_id": status["run"]["run_id"],
                "round": status["run"]["round"],
                "peer_id": status["peer_id"],
                "control": str(victim.control_socket),
            }
            protocols = [
                "/meshsub/1.1.0",
                "/peertrain/dht/1.0.0",
                "/ipfs/id/1.0.0",
                "/ipfs/ping/1.0.0",
            ]

            async def window():
                nonlocal delivered
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_sample, probe, args.seconds)
                    delivered = await attack(addr, protocols, args.seconds, run)

            trio.run(window)
        else:
            trio.run(_sample, probe, args.seconds)
        elapsed = time.monotonic() - started
        end_rounds = rounds(daemons)
        crashed = sum(1 for d in daemons if not d.alive())
        log = victim.log_path.read_text(errors="replace")
    finally:
        stop_all(daemons)
    penalised = set(re.findall(r"penalised (\w+)", log))
    return {
        "rounds": min(e - s for e, s in zip(end_rounds, start_rounds, strict=True)),
        "seconds": round(elapsed, 1),
        "victim_rss_growth_mib": round((probe.peak_rss - probe.rss0) / 2**20, 1),
        "victim_peak_fds": probe.peak_fds,
        "crashes": crashed,
        "honest_penalised": len(penalised & honest),
        "attacker_mb_per_s": round(sum(delivered.values()) / elapsed / 1e6, 3),
        "delivered_mb_by_attack": {k: round(v / 1e6, 3) for k, v in delivered.items()},
    }


async def _sample(probe: VictimProbe, seconds: float) -> None:
    with trio.move_on_after(seconds):
        while True:
            probe.sample()
            await trio.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--inner-steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peertrain-flood-") as tmp:
        quiet = measure(Path(tmp) / "quiet", args, attacked=False)
        flooded = measure(Path(tmp) / "flooded", args, attacked=True)
    # rounds per second: the attacked window overruns by the last attack's few seconds
    ratio = (flooded["rounds"] / flooded["seconds"]) / max(quiet["rounds"] / quiet["seconds"], 1e-9)
    print(f"{'':28}{'quiet':>12}{'flooded':>12}")
    for key in quiet:
        if key != "delivered_mb_by_attack":
            print(f"{key:28}{quiet[key]!s:>12}{flooded[key]!s:>12}")
    for name, mb in flooded["delivered_mb_by_attack"].items():
        print(f"  delivered by {name:14}{'':12}{mb:>10} MB")
    print(f"{'rounds/s ratio (target ≥ 0.8)':28}{ratio:>24.2f}")
    print(json.dumps({"quiet": quiet, "flooded": flooded, "rounds_ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
