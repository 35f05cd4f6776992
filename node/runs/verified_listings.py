"""`run list` shows runs, not claims: a listing stays only once its signed manifest verifies.

A DHT entry under `/peertrain/runs` is a stranger's to write: anyone can list a run that does not
exist, under any name, creator and counts. Before a listing is shown, its manifest is fetched by
run ID from the peers that announce it (RUN_LOOKUP, at most `ASK_PER_RUN` of them, each answer
at most 200 KiB and 10 s) and checked against the ID (the ID is the manifest's hash, so nobody
can serve another manifest for it); the labels shown (name, creator, mode, model, admission)
are then the manifest's, whatever the entry said. Verified manifests are remembered
(`MAX_REMEMBERED`), and a run whose manifest no announcer served is not asked about again for
`RETRY_AFTER` seconds, so a flood of fake entries costs at most `CHECKS_PER_LIST` lookups a
listing, picked at random among the runs not known yet (in listing order, fakes whose IDs sort
first took every check).

Unreachable is not guilty, a lie is: an announcer that serves bytes that are no manifest of
the run ID it names, or whose signed entry names a verified run otherwise than its manifest
does (name, creator, mode), is penalised once for it (`blame`); one that serves nothing is
only skipped.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import trio
from peertrain.crdt.manifest import RunManifest, open_manifest
from peertrain.dht import Record
from peertrain.protocol.errors import PeertrainError

from ..net.names import friendly_name

log = logging.getLogger(__name__)

ASK_PER_RUN = 3  # announcers asked for one run's manifest
CHECKS_PER_LIST = 32  # unverified runs checked by one listing (the rest wait for the next)
MAX_REMEMBERED = 256  # verified manifests' labels kept
MAX_FAILED = 1024  # runs whose manifest nobody served, kept to skip
MAX_BLAMED = 1024  # (writer, run) lies already penalised, kept so each costs once
RETRY_AFTER = 60.0
FORGED_MANIFEST_PENALTY = 25.0  # bytes that are no manifest of the run ID: a deliberate lie
MISLABEL_PENALTY = 10.0  # a signed entry that renames a verified run

Fetch = Callable[[str, str], Awaitable[tuple[str, bytes] | None]]
Labels = Callable[[str, bytes, str], tuple[str, str]]  # (mode, spec, name) → (model, admission)
Penalise = Callable[[str, float, str], object]  # the scoreboard's (peer, points, reason)
Served = tuple[str, bytes, RunManifest]  # (peer that served it, envelope, manifest)


class VerifiedListings:
    def __init__(self, me: str, labels: Labels) -> None:
        self.me, self.labels = me, labels
        self.fetch: Fetch | None = None  # the run finder's lookup, set once it exists
        self.penalise: Penalise | None = None  # the node's scoreboard, set with `fetch`
        self._manifests: OrderedDict[str, RunManifest] = OrderedDict()
        self._failed: OrderedDict[str, float] = OrderedDict()  # run ID → trio time to retry
        self._blamed: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def check(self, listings: list, own: set[str], *, within: float) -> None:
        """Fetch and verify the manifests of `listings` (directory.RunListing) not known yet,
        at most `CHECKS_PER_LIST` picked at random, until `within` seconds pass; our own runs
        (`own`) need none."""
        if self.fetch is None:
            return
        unknown = [
            listing
            for listing in listings
            if listing["run_id"] not in own
            and listing["run_id"] not in self._manifests
            and not self.failed(listing["run_id"])
        ]
        random.shuffle(unknown)
        with trio.move_on_after(within):
            async with trio.open_nursery() as nursery:
                for listing in unknown[:CHECKS_PER_LIST]:
                    nursery.start_soon(self.fetch_manifest, listing)

    def failed(self, run_id: str) -> bool:
        """No announcer served the run's manifest lately (it is not asked about again yet)."""
        return self._failed.get(run_id, 0.0) > trio.current_time()

    def first(self, listings: list) -> list:
        """`listings` verified first, then those not tried, those that failed lately last."""
        return sorted(listings, key=lambda r: self._rank(r["run_id"]))

    def _rank(self, run_id: str) -> int:
        return 0 if run_id in self._manifests else 2 if self.failed(run_id) else 1

    def creators(self) -> dict[str, str]:
        """run ID → its creator, for every verified run (what merging entries needs to tell
        the creator's own entry from one that claims to be it)."""
        return {run_id: m.creator for run_id, m in self._manifests.items()}

    def keep(self, listings: list, own: set[str]) -> list:
        """`listings` whose manifests verified, relabelled from them, and our own runs."""
        kept = []
        for listing in listings:
            manifest = self._manifests.get(listing["run_id"])
            if listing["run_id"] in own:
                kept.append(listing)
            elif manifest is not None:
                kept.append(self._relabelled(listing, manifest))
        return kept

    def blame(self, records: list[Record]) -> None:
        """Penalise, once each, writers whose signed entries name a verified run otherwise
        than its manifest does (honest members copy the manifest's labels, cut to the entry's
        bounds, so any other label is a lie)."""
        for record in records:
            runs = record.value.get("runs") if isinstance(record.value, dict) else None
            for item in runs if isinstance(runs, list) else []:
                known = isinstance(item, dict) and isinstance(item.get("run_id"), str)
                manifest = self._manifests.get(item["run_id"]) if known else None
                if manifest is None or record.writer == self.me or _labels_match(item, manifest):
                    continue
                self._blame(record.writer, manifest.run_id, MISLABEL_PENALTY, "renamed the run")

    async def fetch_manifest(self, listing) -> Served | None:
        """The run's manifest from one of its announcers, verified against its ID and
        remembered; None (and the run skipped for `RETRY_AFTER`) when none served it."""
        run_id = listing["run_id"]
        if self.fetch is None:
            return None
        for peer in self._asked(listing):
            answer = await self.fetch(peer, run_id)
            if answer is None or answer[0] != run_id:
                continue  # unreachable, or a run named by this ID: not a lie
            try:
                manifest = open_manifest(answer[1], run_id)
            except PeertrainError as exc:
                self._blame(peer, run_id, FORGED_MANIFEST_PENALTY, f"served a bad manifest: {exc}")
                continue
            self._remember(run_id, manifest)
            return peer, answer[1], manifest
        self._failed[run_id] = trio.current_time() + RETRY_AFTER
        self._failed.move_to_end(run_id)
        while len(self._failed) > MAX_FAILED:
            self._failed.popitem(last=False)
        return None

    def _asked(self, listing) -> list[str]:
        """The announcers asked: the one that says it is the creator first, the others in a
        new random order each time (in the order their IDs sort, writers that sort first and
        serve nothing hid the run from every check)."""
        others = [p for p in listing["announced_by"] if p not in (self.me, listing["creator"])]
        random.shuffle(others)
        said = listing["creator"]
        creator = [said] if said in listing["announced_by"] and said != self.me else []
        return creator + others[: ASK_PER_RUN - len(creator)]

    def _blame(self, peer: str, run_id: str, points: float, why: str) -> None:
        if (peer, run_id) in self._blamed:
            return
        self._blamed[(peer, run_id)] = None
        while len(self._blamed) > MAX_BLAMED:
            self._blamed.popitem(last=False)
        log.info("%s lied about run %s: %s", peer, run_id[:16], why)
        if self.penalise is not None:
            self.penalise(peer, points, f"run listing: {why} (run {run_id[:16]})")

    def _remember(self, run_id: str, manifest: RunManifest) -> None:
        self._failed.pop(run_id, None)
        self._manifests[run_id] = manifest
        self._manifests.move_to_end(run_id)
        while len(self._manifests) > MAX_REMEMBERED:
            self._manifests.popitem(last=False)

    def _relabelled(self, listing, manifest: RunManifest):
        model, admission = self.labels(manifest.mode, manifest.spec, manifest.name)
        return {
            **listing,
            "name": manifest.name,
            "creator": manifest.creator,
            "creator_name": friendly_name(manifest.creator),
            "mode": manifest.mode,
            "model": model,
            "admission": admission,
        }


def _labels_match(item: dict, manifest: RunManifest) -> bool:
    """An entry's labels are the manifest's as directory.announce_entry cuts them."""
    told = (item.get("name"), item.get("creator"), item.get("mode"))
    return told == (manifest.name[:64], manifest.creator[:64], manifest.mode[:16])
