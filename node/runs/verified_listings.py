"""`run list` shows runs, not claims: a listing stays only once its signed manifest verifies.

A DHT entry under `/peertrain/runs` is a stranger's to write: anyone can list a run that does not
exist, under any name, creator and counts. Before a listing is shown, its manifest is fetched by
run ID from the peers that announce it (RUN_LOOKUP, at most `ASK_PER_RUN` of them) and checked
against the ID (the ID is the manifest's hash, so nobody can serve another manifest for it); the
labels shown (name, creator, mode, model, admission) are then the manifest's, whatever the
entry said. Verified manifests are remembered (`MAX_REMEMBERED`), and a run whose manifest no
announcer served is not asked about again for `RETRY_AFTER` seconds, so a flood of fake entries
costs at most `CHECKS_PER_LIST` lookups a listing and nothing the next `RETRY_AFTER` seconds.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import trio
from peertrain.crdt.manifest import RunManifest, open_manifest
from peertrain.protocol.errors import PeertrainError

from ..net.names import friendly_name

log = logging.getLogger(__name__)

ASK_PER_RUN = 3  # announcers asked for one run's manifest
CHECKS_PER_LIST = 32  # unverified runs checked by one listing (the rest wait for the next)
MAX_REMEMBERED = 256  # verified manifests' labels kept
MAX_FAILED = 1024  # runs whose manifest nobody served, kept to skip
RETRY_AFTER = 60.0

Fetch = Callable[[str, str], Awaitable[tuple[str, bytes] | None]]
Labels = Callable[[str, bytes, str], tuple[str, str]]  # (mode, spec, name) → (model, admission)


class VerifiedListings:
    def __init__(self, me: str, labels: Labels) -> None:
        self.me, self.labels = me, labels
        self.fetch: Fetch | None = None  # the run finder's lookup, set once it exists
        self._manifests: OrderedDict[str, RunManifest] = OrderedDict()
        self._failed: OrderedDict[str, float] = OrderedDict()  # run ID → trio time to retry

    async def check(self, listings: list, own: set[str], *, within: float) -> None:
        """Fetch and verify the manifests of `listings` (directory.RunListing) not known yet,
        at most `CHECKS_PER_LIST`, until `within` seconds pass; our own runs (`own`) need none."""
        if self.fetch is None:
            return
        now = trio.current_time()
        unknown = [
            listing
            for listing in listings
            if listing["run_id"] not in own
            and listing["run_id"] not in self._manifests
            and self._failed.get(listing["run_id"], 0.0) <= now
        ]
        with trio.move_on_after(within):
            async with trio.open_nursery() as nursery:
                for listing in unknown[:CHECKS_PER_LIST]:
                    nursery.start_soon(self._check, listing)

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

    async def _check(self, listing) -> None:
        run_id = listing["run_id"]
        for peer in [p for p in listing["announced_by"] if p != self.me][:ASK_PER_RUN]:
            assert self.fetch is not None
            answer = await self.fetch(peer, run_id)
            if answer is None or answer[0] != run_id:
                continue
            try:
                manifest = open_manifest(answer[1], run_id)
            except PeertrainError as exc:
                log.info("%s served a bad manifest for run %s: %s", peer, run_id[:16], exc)
                continue
            self._remember(run_id, manifest)
            return
        self._failed[run_id] = trio.current_time() + RETRY_AFTER
        while len(self._failed) > MAX_FAILED:
            self._failed.popitem(last=False)

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
