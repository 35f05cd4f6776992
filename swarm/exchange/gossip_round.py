"""What one member knows of one round of update gossip: who announced which update, who holds
each payload, what is in, and why a fetch failed; and when our own messages are sent again.

Kept apart from update_gossip.py (the announce/pull machinery) because it is pure bookkeeping:
no transport, no task; its bounds (`MAX_SENDERS`, `MAX_HOLDERS`) are what keep a flood of
announcements from growing a round's memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from peertrain.swarm.exchange.announcement import UpdateAnnouncement
    from peertrain.swarm.exchange.round_pace import RoundPace

MAX_SENDERS = 256  # announced senders recorded per round (members are far fewer)
MAX_HOLDERS = 64  # holders recorded per payload


def _room(table: list[str], cap: int, newcomer: str, member: Callable[[str], bool], evict) -> bool:
    """Whether `newcomer` gets a place in `table` (at most `cap`): while there is room, or as a
    member, by evicting the newest stranger (`evict(peer)`)."""
    if len(table) < cap:
        return True
    if not member(newcomer):
        return False
    stranger = next((p for p in reversed(table) if not member(p)), None)
    if stranger is None:
        return False
    evict(stranger)
    return True


@dataclass
class GossipRound:
    announced: dict[str, UpdateAnnouncement] = field(default_factory=dict)  # sender → announcement
    holders: dict[bytes, list[str]] = field(default_factory=dict)  # checksum → peers holding it
    payloads: dict[str, bytes] = field(default_factory=dict)  # sender → verified payload
    # sender → (failed fetches, the last one's error): why a round closed without an update
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)
    # sender → when its payload was in (trio time): its lag, for round_pace.py
    arrived: dict[str, float] = field(default_factory=dict)
    # sender → why this round no longer waits for it (round_pace.py): it left, or fell silent
    dropped: dict[str, str] = field(default_factory=dict)
    changed: trio.Event = field(default_factory=trio.Event)
    # Set, then replaced, each time a holder is added: wakes every pull waiting for one.
    holder_added: trio.Event = field(default_factory=trio.Event)

    def record(self, origin: str, ann: UpdateAnnouncement, member: Callable[[str], bool]) -> None:
        """Note an announcement: a sender's own (one per sender), or a holder of a payload that
        its sender announced (a holds note for anything else names nothing we would fetch).
        Both tables are bounded and first come is not first kept: a `member`'s entry always
        goes in, evicting a stranger's, and strangers fill only the room left (256 fresh keys
        announcing ahead of a round filled it, and the members' own announcements were
        dropped: every round closed at its deadline with each member's update alone)."""
        if not ann.holds and ann.sender not in self.announced:
            if not _room(list(self.announced), MAX_SENDERS, ann.sender, member, self._forget):
                return
            self.announced[ann.sender] = ann
        own = self.announced.get(ann.sender)
        if own is None or own.checksum != ann.checksum:
            return
        holders = self.holders.setdefault(ann.checksum, [])
        if origin not in holders and _room(holders, MAX_HOLDERS, origin, member, holders.remove):
            holders.append(origin)
            self.holder_added.set()
            self.holder_added = trio.Event()
        self.changed.set()

    def _forget(self, sender: str) -> None:
        """A stranger's announcement makes room for a member's (it was never pulled: only
        members' updates are)."""
        ann = self.announced.pop(sender)
        self.holders.pop(ann.checksum, None)

    def left(self, peer: str) -> None:
        """`peer`'s last connection closed: not waited for unless it announced its update
        (a holder may still serve that)."""
        if peer not in self.announced:
            self.dropped.setdefault(peer, "its connection closed")
            self.changed.set()

    def waiting_for(self, expected: set[str], pace: RoundPace, now: float, me: str) -> set[str]:
        """Of the `expected` members, those whose updates are not in and who are still waited
        for: one whose update is not in beyond its pace (counted from the round's first update)
        is dropped here.

        Nobody is dropped while our own update is the only one in: nothing says the others are
        late rather than we early (a member whose update came first by more than the floor, on a
        loaded machine, dropped every healthy peer by pace and closed the round alone). Counting
        from the first update of another member instead cost every round with a laggard the
        gap to that update (an announcement-flood run took 1.7× as long)."""
        waiting = expected - set(self.payloads) - set(self.dropped)
        others_in = any(sender != me for sender in self.arrived)
        if waiting and others_in:  # announced or not: a frozen sender serves nothing either
            overdue = pace.overdue(waiting, min(self.arrived.values()), now)
            self.dropped.update(overdue)
            waiting -= set(overdue)
        return waiting

    def spread(self) -> float:
        """Seconds from the first update in to the last."""
        return max(self.arrived.values()) - min(self.arrived.values()) if self.arrived else 0.0

    def failed(self, sender: str, error: str) -> None:
        """A fetch of `sender`'s update failed with `error`."""
        count, _ = self.failures.get(sender, (0, ""))
        self.failures[sender] = (count + 1, error)

    async def another_holder(self, checksum: bytes, known: int) -> None:
        """Return once more than `known` peers announced that they hold `checksum`."""
        while len(self.holders.get(checksum, ())) <= known:
            await self.holder_added.wait()

    def why_missing(self, sender: str) -> str:
        """`sender` and why its update is not in: never announced, or announced and not
        fetched (how often, and the last error), for the log line of a round that closed
        without it."""
        if sender in self.dropped:
            return f"{sender} (not waited for: {self.dropped[sender]})"
        if sender not in self.announced:
            return f"{sender} (no announcement)"
        count, error = self.failures.get(sender, (0, ""))
        if count:
            return f"{sender} (announced; {count} failed fetch(es), last {error})"
        return f"{sender} (announced; fetch still running or not started)"


class Repeat:
    """One of our own messages and when it is next sent again (update_gossip.py `repeat_loop`)."""

    def __init__(self, sealed: bytes) -> None:
        self.sealed = sealed
        self.sent_at = trio.current_time()
        self.gap = 0.0  # 0: not repeated yet

    def due(self, now: float, first: float, most: float) -> bool:
        """Whether a repeat is due at `now`; if so, the next one is scheduled."""
        gap = self.gap or first
        if now - self.sent_at < gap:
            return False
        self.sent_at, self.gap = now, min(2 * gap, most) if self.gap else first
        return True
