"""A network partition and its heal, with real daemons in namespaces of their own.

Five CLI daemons in one open DiLoCo run (member 0 created it: the run's anchor). Two members
are cut off from the three others (nftables drops every packet between the sides, silently:
no reset, no ICMP) for several of the group's rounds, shorter than the anchor's lease (30 s
past its last renewal), then the cut is healed. The rule (docs/architecture.md#partitions): the
side with the anchor trains on; the side without one closes no round the anchor has not
attested and waits while the anchor's lease lives; on the heal it adopts the anchor's newest
state and the run holds one model within 3 rounds, with no daemon restarted and no honest peer
penalised. (Past the lease the cut side trains on alone: benchmarks/soak.py's 60 s cut.)
"""

from __future__ import annotations

import time

import pytest
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.testing import DIGITS_MLP
from peertrain.testing.lan_run import LanRun
from peertrain.testing.lan_watch import Poller, Rounds, rounds_of
from peertrain.testing.machine_pace import inner_steps_for
from peertrain.testing.netns_lan import Lan, why_unavailable

# serial: its rounds must keep a pace the lease and the heal are measured against (beside another
# daemon test a 25 s cut outlived the lease once)
pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.serial]

SIZE = 5
CUT = [3, 4]
MAJORITY = [0, 1, 2]
ROUNDS_CUT = 1  # rounds the anchor's side closes while the others are cut off
# s, under the lease's 30 s past its last renewal, which is up to 10 s old when the cut begins:
# a 25 s cut outlived it under a fresh clone's suite, and the cut side trained on alone
CUT_AT_MOST = 18.0
HEAL_WITHIN = 3  # rounds after the heal by which every member holds one model

# The group's rounds must be a few times longer than the network takes to notice the heal (dead
# TCP connections behind a silent drop are found by timeouts, not by compute: 5.6 to 20.7 s
# here; at 0.6 s rounds the heal took 8 rounds, at 1.5 s 5), and short enough that the anchor's
# side closes one inside the cut: its compute, then the cut members' silence beyond their pace
# (5 s). Inner steps are sized to this machine (a fixed 4,000 made 4 s rounds on one of our
# machines and 26 s ones on another, longer than any cut the lease allows).
ROUND_COMPUTE_S = 8.0
PACE_ROUNDS = 3  # rounds before the cut: a member's silence is judged after 3 lags (round_pace.py)


def run_flags() -> list[str]:
    spec = DiLoCoSpec(model="mlp", dataset="digits", batch_size=32)
    steps = inner_steps_for(ROUND_COMPUTE_S, spec, daemons=SIZE)
    return [
        *DIGITS_MLP,
        *f"--inner-steps {steps} --round-timeout 10 --min-members {SIZE} --rounds 0".split(),
        *f"--set num_shards={SIZE}".split(),
    ]


@pytest.fixture
def lan():
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    with Lan(SIZE) as lan:
        yield lan


def test_a_partition_heals_into_one_model_without_restarts_or_penalties(lan, tmp_path):
    flags = run_flags()
    run = LanRun(lan, tmp_path, SIZE, flags)
    rounds = Rounds(SIZE)
    poller = Poller(run, rounds)
    try:
        run.start()
        poller.until(lambda runs: min(rounds_of(runs, range(SIZE))) >= PACE_ROUNDS, timeout=300)
        pids = [d.process.pid for d in run.daemons]
        runs = poller.poll()
        cut_at = max(rounds_of(runs, MAJORITY))
        lan.partition(CUT)
        cut_since = time.monotonic()
        runs = poller.until(  # within the anchor's lease: past it the cut side goes on alone
            lambda runs: (
                min(rounds_of(runs, MAJORITY)) >= cut_at + ROUNDS_CUT
                or time.monotonic() - cut_since > CUT_AT_MOST
            ),
            timeout=240,
        )
        minority_during = rounds_of(runs, CUT)
        partitioned_s = time.monotonic() - cut_since
        healed_at = max(rounds_of(runs, MAJORITY))
        lan.heal()
        healed = time.monotonic()
        poller.until(
            lambda _: rounds.first_agreement(list(range(SIZE)), healed_at) is not None,
            timeout=240,
        )
        heal_s = time.monotonic() - healed
        agreed = rounds.first_agreement(list(range(SIZE)), healed_at)
        final = poller.poll()
        penalties = run.penalties()
        restarts = [s["restarts"] for s in _services(run) if s.get("restarts")]
    finally:
        poller.close()
        codes = run.stop()
    print(
        f"{flags[flags.index('--inner-steps') + 1]} inner steps a round; "
        f"cut at round {cut_at} for {partitioned_s:.0f} s; the anchor's side reached "
        f"{healed_at}, the cut side {minority_during}; one model at round {agreed}, "
        f"{heal_s:.1f} s after the heal"
    )
    assert agreed is not None and agreed - healed_at <= HEAL_WITHIN, (
        healed_at,
        agreed,
        [dict(list(rounds.seen[i].items())[-8:]) for i in range(SIZE)],
    )
    assert healed_at >= cut_at + 1, (cut_at, healed_at)  # the anchor's side trained on
    # the side without the anchor did not run off on its own
    assert max(minority_during) <= cut_at + 1, minority_during
    assert [d.process.pid for d in run.daemons] == pids and codes == [0] * SIZE
    assert all(run_ is not None for run_ in final)
    assert not restarts, restarts
    assert penalties == {"penalties_logged": 0, "peer_faults": 0}, penalties
    assert sum(r["rejected_updates"] for r in final) == 0
    assert sum(r["rounds_alone"] for r in final) == 0


def _services(run: LanRun) -> list[dict]:
    return [svc for s in run.statuses() if s for svc in s.get("services", [])]
