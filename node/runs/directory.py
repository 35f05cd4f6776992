"""Runs in the DHT: every member announces its runs; anyone lists them or finds one to join.

A run is named by its ID (the hash of its signed manifest); its name is a label that anyone may
reuse. Each member keeps one signed, expiring entry under `/peertrain/runs` listing the runs it
takes part in (re-put every `ANNOUNCE_EVERY` and whenever its runs change, so a departed node's
entry lapses within `ANNOUNCE_TTL`). An entry is a claim, not proof: a join counts a run as a
candidate only once a peer served a manifest that verifies against the run ID, and only such
verified candidates can make a name ambiguous (name_lookup.py, run_lookup.py); `survey` (`run
list`) shows a run only once its manifest verified (verified_listings.py). A liar can neither
make a join pick its run, nor block or hide a run from a join by name, nor show a run that
does not exist.
"""

from __future__ import annotations

import functools
import logging
import statistics
import string
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import trio
from libp2p.abc import IHost
from peertrain.crdt.manifest import RunManifest
from peertrain.dht import Record, runs_key
from peertrain.protocol.errors import PeertrainError

from ..errors import ControlError
from ..net.names import friendly_name
from ..services.dht import DhtService
from .session import RunSession
from .spec_check import decode_spec
from .verified_listings import VerifiedListings

log = logging.getLogger(__name__)

ANNOUNCE_TTL = 600.0
ANNOUNCE_EVERY = ANNOUNCE_TTL / 3
MAX_LISTED = 8  # runs in one peer's entry (a node takes part in at most MAX_RUNS)
MIN_PREFIX = 8  # hex characters of a run ID that `join --run` accepts for the whole ID
_LABELS = ("name", "creator", "creator_name", "mode", "model", "admission")
_TEXT_LIMITS = {"id": 128, "name": 64, "creator": 64, "mode": 16, "model": 64, "admission": 16}


class RunListing(TypedDict):
    """One run as `peertrain run list --json` shows it."""

    run_id: str
    name: str
    creator: str  # peer ID of the run's creator (as the announcers claim it)
    creator_name: str  # the friendly name of that peer ID
    mode: str
    model: str
    members: int
    round: int
    admission: str  # "open" unless the manifest says otherwise
    announced_by: list[str]  # peers whose DHT entries list it (creator first, when among them)
    # whose the member and round counts are: "own" (read from our replica of the run's state),
    # "creator" (the creator's signed entry, read from its replica) or "claims" (the median of
    # the announcers': anyone's to set, shown as such)
    counts_from: str


def is_id_prefix(query: str) -> bool:
    return len(query) >= MIN_PREFIX and all(c in string.hexdigits for c in query)


def matches(query: str, run_id: str, name: str) -> bool:
    """A run is meant by its name, its whole ID, or an ID prefix of at least MIN_PREFIX hex."""
    return query in (name, run_id) or (is_id_prefix(query) and run_id.startswith(query.lower()))


def announce_entry(listings: list[RunListing]) -> dict[str, Any]:
    """What this node puts under `/peertrain/runs`: its runs, each field bounded."""
    runs = []
    for listing in listings[:MAX_LISTED]:
        item = {k: listing[k] for k in ("run_id", "name", "creator", "mode", "model", "admission")}
        item = {k: str(v)[: _TEXT_LIMITS.get(k.removeprefix("run_"), 64)] for k, v in item.items()}
        runs.append({**item, "members": int(listing["members"]), "round": int(listing["round"])})
    return {"runs": runs}


def merge_entries(
    records: list[Record], true_creators: Mapping[str, str] | None = None
) -> list[RunListing]:
    """One listing per run ID from every announcer's entry; the creator's own entry decides the
    labels and the member and round figures (it reads them from the run's own state). Without
    it, the figures are the median of the claims: the largest was anyone's to set (a stranger's
    entry showed 2^40 − 1 members). `true_creators`: run ID → creator of verified manifests; an
    entry that names itself creator of such a run without being it is one claim among many."""
    true_creators = true_creators or {}
    by_id: dict[str, RunListing] = {}
    claims: dict[str, list[tuple[int, int]]] = {}
    creators: set[str] = set()
    for record in sorted(records, key=lambda r: r.writer):
        for item in _entry_runs(record.value):
            by_creator = record.writer == true_creators.get(item["run_id"], item["creator"])
            known = by_id.setdefault(item["run_id"], item)
            if by_creator and known is not item:
                known.update({k: item[k] for k in _LABELS})  # a member's claim gives way
            if by_creator:
                creators.add(item["run_id"])
                known["members"], known["round"] = item["members"], item["round"]
                known["counts_from"] = "creator"
                known["announced_by"].insert(0, record.writer)
            else:
                known["announced_by"].append(record.writer)
            claims.setdefault(item["run_id"], []).append((item["members"], item["round"]))
    for run_id, known in by_id.items():
        if run_id not in creators:
            told = claims[run_id]
            known["members"] = int(statistics.median_low(m for m, _ in told))
            known["round"] = int(statistics.median_low(r for _, r in told))
    return sorted(by_id.values(), key=lambda r: (r["name"], r["run_id"]))


def _entry_runs(value: Any) -> list[RunListing]:
    """The well-formed runs of one DHT entry (anything malformed is skipped, not trusted)."""
    runs = value.get("runs") if isinstance(value, dict) else None
    out: list[RunListing] = []
    for item in runs[:MAX_LISTED] if isinstance(runs, list) else []:
        try:
            listing = _listing(item)
        except (KeyError, TypeError, ValueError):
            continue
        out.append(listing)
    return out


def _listing(item: Any) -> RunListing:
    texts = {k: item[k] for k in ("run_id", "name", "creator", "mode", "model")}
    texts["admission"] = item.get("admission") or "open"
    for key, text in texts.items():
        if type(text) is not str or len(text) > _TEXT_LIMITS.get(key.removeprefix("run_"), 64):
            raise ValueError(key)
    if not all(c in string.hexdigits for c in texts["run_id"]):
        raise ValueError("run_id")
    counts = {k: item[k] for k in ("members", "round")}
    if any(type(v) is not int or not 0 <= v < 1 << 40 for v in counts.values()):
        raise ValueError("counts")
    creator_name = friendly_name(texts["creator"]) if texts["creator"] else ""
    return RunListing(
        **texts, **counts, creator_name=creator_name, announced_by=[], counts_from="claims"
    )


def listing_of(session: RunSession) -> RunListing:
    """One of our runs, as the DHT announces it."""
    status = session.status()
    manifest = session.manifest
    model, admission = _labels(manifest.mode, manifest.spec, manifest.name)
    return RunListing(
        run_id=session.run_id,
        name=manifest.name,
        creator=manifest.creator,
        creator_name="",
        mode=manifest.mode,
        model=model,
        members=len(status["members"]),
        round=int(status["round"]),
        admission=admission,
        announced_by=[],
        counts_from="own",
    )


@functools.lru_cache(maxsize=16)
def _labels(mode: str, spec: bytes, name: str) -> tuple[str, str]:
    """(model, admission) of a spec; a spec this node cannot read says "?" and "open"."""
    manifest = RunManifest(creator="", created_ms=0, name=name, mode=mode, spec=spec)
    try:
        decoded = decode_spec(manifest)
    except ControlError:
        return "?", "open"
    return decoded.model, _admission(decoded)


def _admission(spec: Any) -> str:
    """Who may train in the run, as the spec says; specs from before admission say nothing
    (open). Read defensively: a string, or a mapping with a `mode`."""
    admission = getattr(spec, "admission", None)
    if isinstance(admission, str) and admission:
        return admission[:16]
    mode = admission.get("mode") if isinstance(admission, Mapping) else None
    return mode[:16] if isinstance(mode, str) and mode else "open"


class RunDirectory:
    """Announces this node's runs (`listings()`, called at each put) and reads everyone's."""

    def __init__(
        self,
        dht: DhtService,
        host: IHost,
        peer_id: str,
        listings: Callable[[], list[RunListing]],
    ) -> None:
        self.dht, self.host, self.peer_id, self.listings = dht, host, peer_id, listings
        self._changed = trio.Event()
        self.listed_names: list[str] = []  # every run name the last `find` saw listed
        self.verified = VerifiedListings(peer_id, _labels)  # its `fetch` is the run finder's

    def changed(self) -> None:
        """Our runs changed: announce now rather than at the next period."""
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        announced_any, retry = False, 1.0
        while True:
            entry = announce_entry(self.listings())
            wait = ANNOUNCE_EVERY
            if entry["runs"] or announced_any:  # an empty entry withdraws what we announced
                try:
                    await self.dht.put(runs_key(), entry, ttl=ANNOUNCE_TTL)
                    announced_any, retry = True, 1.0
                except (PeertrainError, trio.TooSlowError, ValueError) as exc:
                    log.info(
                        "announcing runs in the DHT failed (%s); retrying in %.0f s", exc, retry
                    )
                    wait, retry = retry, min(retry * 2, ANNOUNCE_EVERY)
            with trio.move_on_after(wait):
                await self._changed.wait()
            self._changed = trio.Event()

    async def list_runs(self, *, within: float = 10.0) -> list[RunListing]:
        return (await self.survey(within=within))["runs"]

    async def survey(self, *, within: float = 10.0) -> dict[str, Any]:
        """`run list`: {runs, unverified, unchecked}. `runs`: every run announced in the DHT
        whose signed manifest verifies (verified_listings.py), labelled from it, and ours,
        announced or not yet; counts from our replica for ours, else the true creator's own
        entry, else the median claim (`counts_from` says which). `unverified`: listed runs
        left out because no announcer served their manifest lately; `unchecked`: those left
        out because they were not checked within `within` (the next listing checks them)."""
        records = await self._records(within)
        ours = {r["run_id"]: r for r in self.listings()}
        await self.verified.check(merge_entries(records), set(ours), within=within)
        self.verified.blame(records)
        merged = merge_entries(records, true_creators=self.verified.creators())
        runs = self.verified.keep(merged, set(ours))
        for run in runs:
            if run["run_id"] in ours:  # our replica of the run's state, not an entry's claim
                own = ours[run["run_id"]]
                run.update(members=own["members"], round=own["round"], counts_from="own")
        shown = {r["run_id"] for r in runs}
        hidden = [r["run_id"] for r in merged if r["run_id"] not in shown]
        unverified = sum(self.verified.failed(run_id) for run_id in hidden)
        return {"runs": runs, "unverified": unverified, "unchecked": len(hidden) - unverified}

    async def listed(self, *, within: float = 10.0) -> list[RunListing]:
        """Every run announced in the DHT, as the entries claim it (and ours); a run whose
        manifest verified is labelled by its true creator's entry, not by one naming itself
        (and a writer whose entry renames it is blamed, as `survey` does)."""
        records = await self._records(within)
        self.verified.blame(records)
        return merge_entries(records, true_creators=self.verified.creators())

    async def _records(self, within: float) -> list[Record]:
        """The DHT's entries under `/peertrain/runs` (others') and our own, as we announce it."""
        records: list[Record] = []
        with trio.move_on_after(within):
            try:
                records = list((await self.dht.get(runs_key())).values())
            except (PeertrainError, ValueError) as exc:
                log.info("reading runs from the DHT failed: %s", exc)
        me = self.peer_id
        own = Record(
            key=runs_key(),
            writer=me,
            value=announce_entry(self.listings()),
            issued_at=0.0,
            expires_at=0.0,
        )
        return [r for r in records if r.writer != me] + [own]
