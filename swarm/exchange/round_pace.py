"""Whom an open round stops waiting for: members that left, and members silent beyond their pace.

A round waits for the updates of its counted group's live members, at most `round_timeout`. A
lease lapses only 30 s after its holder died, so a member killed mid-round cost the round its
whole deadline (60 s by default), in every round it happened; torchft drops a failed replica
group from its quorum within one step. Two signals come sooner, and a stranger can forge
neither about someone else:

- its connection closed: the node says so (`left`) the moment its last connection to that peer
  is gone. A member that had not announced its update is not waited for in this round; one that
  had stays, since any holder may still serve its payload. No later round waits for it either
  until a connection to it opens again (`back`): its lease lives on for 30 s. A member whose
  process was killed loses its connections at once (the kernel closes them).
- silence beyond its pace: each member's lag (how long after a round's first update its own is
  in, announced and fetched) is kept for the last `PACE_ROUNDS` rounds. One whose update is not
  in for longer than max(`PACE_FLOOR`, `PACE_FACTOR` × its median lag) after the round's first
  is not waited for (while our own update is the only one in, nobody is dropped: we may be the
  early one, gossip_round.py): a frozen process (SIGSTOP, a swapping laptop) keeps its
  connections and lease but says nothing, and serves nothing it announced before it froze (its
  fetch hangs).
  Until a member has `PACE_MIN_SAMPLES` lags nothing explains its silence, and the round waits
  for it until the deadline.

The wait grows with the inner phase (`straggler_allowance`): members that start a round together
end it apart by a share of its compute, not by a fixed few seconds. At 25M parameters four
daemons on 2 cores finish 330 s inner phases tens of seconds apart (and a 21 s checkpoint shifts
whoever writes one); a sharded round's 5 s wait for commitments closed rounds with 1 to 3 of 4
updates, and a pace floor of 5 s would drop members for the same jitter.

Dropping is for the open round only, and changes nothing about who may send: an update that
arrives before the round closes still counts. Dropping a member that was merely slow costs it
its update in that round, and a member that closed the round with it is repaired by replay of
the trusted record; never dropping the dead cost every round its deadline.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque

PACE_ROUNDS = 8  # lags kept per member
PACE_MIN_SAMPLES = 3  # lags a member needs before its silence can drop it
# seconds of silence no pace shortens: at 2 s, members of a 5-daemon churn run on 2 cores
# dropped honest members 2 s behind the first update and closed rounds without them
PACE_FLOOR = 5.0
PACE_FACTOR = 3.0  # × a member's median lag
STRAGGLER_SHARE = 0.15  # of our own inner phase: how far behind us an honest member may end it
MAX_PACED = 1024  # members whose lags are kept (the counted group is at most 64; oldest go)
MAX_GONE = 1024  # departed members remembered (only members: strangers would evict them)


class RoundPace:
    """Lags of members' updates behind each round's first, over the last rounds."""

    def __init__(self) -> None:
        self._lags: OrderedDict[str, deque[float]] = OrderedDict()
        self.gone: dict[str, None] = {}  # peers whose last connection closed, oldest first
        self.allowance = 0.0  # seconds no pace shortens this round (straggler_allowance)

    def left(self, peer: str) -> None:
        self.gone[peer] = None
        while len(self.gone) > MAX_GONE:
            del self.gone[next(iter(self.gone))]

    def back(self, peer: str) -> None:
        self.gone.pop(peer, None)

    def closed(self, arrivals: dict[str, float], counted: set[str]) -> None:
        """A round closed; `arrivals`: sender → when its update was in (trio time).
        Only counted members' lags are kept: a stranger's announcements cost no table slot."""
        if not arrivals:
            return
        first = min(arrivals.values())
        for sender, at in arrivals.items():
            if sender not in counted:
                continue
            lags = self._lags.pop(sender, None) or deque(maxlen=PACE_ROUNDS)
            lags.append(at - first)
            self._lags[sender] = lags  # most recently heard last
        while len(self._lags) > MAX_PACED:
            self._lags.popitem(last=False)

    def patience(self, sender: str) -> float | None:
        """Seconds after a round's first update that `sender`'s silence is explained; None:
        too few lags to say (wait until the deadline)."""
        lags = self._lags.get(sender)
        if lags is None or len(lags) < PACE_MIN_SAMPLES:
            return None
        return max(PACE_FLOOR, self.allowance, PACE_FACTOR * statistics.median(lags))

    def overdue(self, silent: set[str], first: float, now: float) -> dict[str, str]:
        """Of the `silent` members (no update in yet), those silent beyond their pace, each
        with why."""
        out = {}
        for sender in sorted(silent):
            patience = self.patience(sender)
            if patience is not None and now - first > patience:
                out[sender] = f"silent {now - first:.1f} s, its pace explains {patience:.1f} s"
        return out


def straggler_allowance(inner_seconds: float) -> float:
    """Seconds a round waits beyond its fixed deadlines for members that end their inner phase
    after us, when ours took `inner_seconds`: a toy round's inner phase of a second adds nothing
    that matters, a 330 s one adds 50 s."""
    return STRAGGLER_SHARE * max(inner_seconds, 0.0)
