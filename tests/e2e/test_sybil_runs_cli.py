"""Issue 14 end to end, through the CLI with daemons as processes: 4 honest daemons and 6 Sybil
daemons (fresh IDs, each an ordinary daemon with one attack on: 2 scale their updates 1000×,
2 announce and attest round 10^9, 2 serve and attest a NaN state one round ahead).

Ten daemons on two cores are heavy, so they are started once and share the runs. Phase one:
a clean run of the honest four and an open run (the default admission and aggregator) whose
quorum is all ten, side by side, same spec and seed; the honest members finish every round of
the open run with one checksum, no state adopted from a claim, and a final loss within 5% of
the clean run's. Phase two comes after it (an invite run's drops penalise the Sybils, which must
not change phase one): the creator certifies the honest three with `peertrain run invite`, they
join with `--certificate`, the Sybils join too, and their traffic is dropped before it costs
anything (`dropped` by kind in `status --json` and in the creator's /metrics; no state
downloaded by any honest member). The open run's Sybils that attack states train honestly and
their updates count, so the open run's loss may be lower than the clean one: only harm is bounded.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import free_tcp_port, scrape_metrics, wait_until_sync
from peertrain.testing.processes import peertrain_cli

# Ten daemons in three runs on two cores overloaded gossipsub (thousands of outbound-queue drops
# per daemon: `dropped_by_libp2p`) and members' update announcements were lost for whole rounds
# while each member repeated its own every 2 s: the test failed 2 of 3 runs here. Repeats at
# doubling gaps (2 s up to 8 s, update_gossip.py) lost 4 and 2 rounds' updates in two runs
# instead of 8-28, and both passed (clean/open loss 0.451/0.355 and 0.388/0.351).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

HONEST, SYBILS = 4, 6
ATTACKS = ("scaled", "future-round", "poisoned-state")
ROUNDS = 4  # each round of ten daemons on two cores takes 10-15 s; 4 rounds learn plenty
# digits on a small MLP, 20 inner steps: 2.26 -> 0.522 in 4 rounds of 4 updates, the same bits in
# one process and through the CLI (4 daemons); a round that misses members ends higher
SPEC_FLAGS = [
    *("--model", "mlp", "--dataset", "digits", "--batch-size", "32", "--lr", "0.003"),
    *("--inner-steps", "20", "--rounds", str(ROUNDS), "--round-timeout", "30", "--seed", "3"),
    *("--set", "outer_momentum=0.5", "--set", "start_timeout=900"),
]
INVITE_FLAGS = ["--min-members", str(HONEST), "--admission", "invite"]
JOIN_TAIL = ["--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]


def at_once(*calls):
    """Run CLI commands side by side (each is a process: on two cores, mostly its imports)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def cli(home, *args: str, timeout: float = 150.0) -> str:
    """`peertrain ARGS --home HOME` as a user types it; its output, or a failure that says it."""
    done = peertrain_cli(*args, "--home", str(home), env=DAEMON_ENV, timeout=timeout, check=False)
    assert done.returncode == 0, f"peertrain {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def run_of(daemon, run_id: str) -> dict | None:
    run = daemon.status(timeout=30.0).get("run") or {}  # ten daemons on two busy cores
    return next((r for r in run.get("runs", [run]) if r.get("run_id") == run_id), None)


def create(daemon, name: str, *flags: str) -> str:
    return json.loads(cli(daemon.home, "run", "create", "--name", name, "--json", *flags))["run_id"]


def join(daemon, run_id: str, *flags: str):
    args = ["run", "join", "--run", run_id, "--timeout", "180", *flags]
    return lambda: cli(daemon.home, *args, timeout=300)


def finished(honest, run_id: str, timeout: float) -> list[dict]:
    """The honest members' view of the run once all finished on one state, or at `timeout`
    (the checks then say what does not hold)."""

    def settled() -> bool:  # a member that finished first follows the trusted final state
        runs = [run_of(d, run_id) for d in honest]
        done = all(r is not None and r["phase"] == "finished" for r in runs)
        return done and len({r["state_checksum"] for r in runs}) == 1

    with contextlib.suppress(TimeoutError):
        wait_until_sync(settled, timeout=timeout, interval=1.0, what=f"run {run_id[:8]} settled")
    return [run_of(d, run_id) for d in honest]


# the same on either update exchange: the all-gather, or the sharded one, where the Sybils also
# own shards of the open run's aggregate (measured: clean 0.5230, open with Sybils 0.4612)
@pytest.mark.parametrize("exchange", ["gather", "sharded"])
def test_sybils_cannot_take_over_an_open_run_and_are_dropped_unseen_by_an_invite_run(
    tmp_path, exchange
):
    spec = [*SPEC_FLAGS, "--set", f"exchange={exchange}"]
    started = time.monotonic()
    metrics = free_tcp_port()
    extra = ["--metrics-listen", f"127.0.0.1:{metrics}"]
    creator = DaemonProcess(tmp_path / "node0", node_args(extra=extra), DAEMON_ENV).start()
    daemons = [creator]
    try:
        addr = creator.wait_ready()["share"]
        # the clean run's quorum is the honest four; the open one's is all ten, so the Sybils
        # are in its counted group from round 0 (a run that starts without them proves nothing)
        clean, public = at_once(
            lambda: create(creator, "clean", *spec, "--min-members", str(HONEST)),
            lambda: create(creator, "public", *spec, "--min-members", str(HONEST + SYBILS)),
        )
        # honest members join the clean run as they start, the Sybils the open one; then the
        # honest ones join the open run too, through the CLI
        for index in range(1, HONEST + SYBILS):
            hostile = ["--attack", ATTACKS[index % 3]] if index >= HONEST else []
            run = public if hostile else clean
            args = ["join", addr, "--run", run, *JOIN_TAIL, *hostile]
            daemons.append(DaemonProcess(tmp_path / f"node{index}", args, DAEMON_ENV).start())
        for daemon in daemons:
            daemon.wait_ready(timeout=240)
        honest, sybils = daemons[:HONEST], daemons[HONEST:]
        at_once(*[join(d, public) for d in honest[1:]])
        baseline = finished(honest, clean, timeout=420)
        attacked = finished(honest, public, timeout=420)
        phase_one = time.monotonic() - started
        check_open_run(baseline, attacked)

        invite = create(creator, "members-only", *spec, *INVITE_FLAGS)
        peers = [d.status()["peer_id"] for d in honest]
        invites = at_once(*[lambda p=p: invite_cli(creator, invite, p) for p in peers[1:]])
        at_once(
            *[
                join(d, invite, "--certificate", c)
                for d, c in zip(honest[1:], invites, strict=True)
            ],
            *[join(d, invite) for d in sybils],
        )
        check_invite_run(finished(honest, invite, timeout=420), set(peers))
        # the same counts as Prometheus series, next to status's run.dropped
        dropped = run_of(creator, invite)["dropped"]
        samples = scrape_metrics(metrics)
        series = {
            k: ("peertrain_run_dropped_total", (("kind", k), ("run", invite))) for k in dropped
        }
        assert all(samples[series[k]] >= count for k, count in dropped.items())  # read later
        assert samples[series["deltas"]] > 0
        print(f"invite run: dropped unseen {dropped}")
    finally:
        stop_all(daemons)
    print(f"phase one {phase_one:.0f} s, in all {time.monotonic() - started:.0f} s")


def invite_cli(creator, run_id: str, peer: str) -> str:
    made = cli(creator.home, "run", "invite", peer, "--run", run_id, "--json")
    return json.loads(made)["certificate"]


def check_open_run(baseline: list[dict], attacked: list[dict]) -> None:
    """Every round, one model, a loss within 5% of the clean run's; the scaled ones refused."""
    assert all(r["round"] == ROUNDS for r in baseline + attacked)
    assert len({r["state_checksum"] for r in baseline}) == 1
    assert len({r["state_checksum"] for r in attacked}) == 1
    clean_loss = sum(r["loss"] for r in baseline) / HONEST
    open_loss = sum(r["loss"] for r in attacked) / HONEST
    print(f"final loss: clean {clean_loss:.4f}, open with Sybils {open_loss:.4f}")
    assert clean_loss < 0.5 * baseline[0]["initial_loss"]  # the honest run learns
    # the Sybils' honest-looking updates may help (more data): only harm is bounded
    assert open_loss <= 1.05 * clean_loss, (open_loss, clean_loss)
    assert all(r["rejected_by_reason"].get("norm", 0) > 0 for r in attacked)  # scaled updates
    # a member that falls behind may download a state, but only the anchor's: nobody is past
    # the last round (10^9) or holds the NaN state (one checksum, a finite, learning loss)


def check_invite_run(members: list[dict], honest: set[str]) -> None:
    """Every round, one model; the Sybils' traffic dropped unseen: no download ever asked one
    of them (a member whose gossip lost an update under load may repair from another member;
    on a quiet machine none downloads at all)."""
    assert all(r["round"] == ROUNDS for r in members)
    assert len({r["state_checksum"] for r in members}) == 1
    assert all(set(r["state_donors"]) <= honest for r in members), honest
    print(
        f"invite run: state downloads {[r['state_downloads'] for r in members]}, all from members"
    )
    dropped = [r["dropped"] for r in members]
    # their leases and state claims (checkpoint announcements are run-state deltas); a
    # non-member counts nobody in its rounds, so it sends no updates or records to drop
    assert all(d["deltas"] > 0 for d in dropped), dropped
    assert all(set(r["members"]) <= honest for r in members)  # no Sybil is kept
