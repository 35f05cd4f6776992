"""Runs in the DHT: every member announces its runs; anyone lists them or finds one to join.

A run is named by its ID (the hash of its signed manifest); its name is a label that anyone may
reuse. Each member keeps one signed, expiring entry under `/peertrain/runs` listing the runs it
takes part in (re-put every `ANNOUNCE_EVERY` and whenever its runs change, so a departed node's
entry lapses within `ANNOUNCE_TTL`). An entry is a claim, not proof: `find` counts a run as a
candidate only once a peer served a manifest that verifies against the run ID, and only such
verified candidates can make a name ambiguous (run_lookup.py); `list_runs` (`run list`) shows a
run only once its manifest verified (verified_listings.py). A liar can neither make a join pick
its run, nor block a join by name, nor show a run that does not exist.
"""

from __future__ import annotations

import functools
import logging
import statistics
import string
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import trio
from libp2p.abc import IHost
from peertrain.crdt.manifest import RunManifest, open_manifest
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
MAX_CANDIDATES = 8  # runs a join fetches manifests of
MAX_PEERS_ASKED = 16  # connected peers a join asks directly
MIN_PREFIX = 8  # hex characters of a run ID that `join --run` accepts for the whole ID
_LABELS = ("name", "creator", "creator_name", "mode", "model", "admission")
Fetch = Callable[[str, str], Awaitable[tuple[str, bytes] | None]]
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


@dataclass(slots=True)
class Candidate:
    """A run a join may mean: verified when a peer served its manifest."""

    run_id: str
    name: str
    creator: str
    mode: str
    envelope: bytes | None = None  # the verified signed manifest
    seeds: set[str] = field(default_factory=set)  # peers that served it

    @classmethod
    def of(cls, run_id: str, manifest: RunManifest) -> Candidate:
        return cls(run_id, manifest.name, manifest.creator, manifest.mode)

    def describe(self) -> str:
        creator = f"{self.creator[:16]}… ({friendly_name(self.creator)})"
        return f"{self.run_id[:16]} by {creator}, {self.mode}"


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
    return RunListing(**texts, **counts, creator_name=creator_name, announced_by=[])


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
        """Every run announced in the DHT whose signed manifest verifies (verified_listings.py),
        labelled from it, its counts from its true creator's own entry when there is one (else
        the median claim), and ours, announced or not yet."""
        records = await self._records(within)
        own = {r["run_id"] for r in self.listings()}
        await self.verified.check(merge_entries(records), own, within=within)
        merged = merge_entries(records, true_creators=self.verified.creators())
        return self.verified.keep(merged, own)

    async def listed(self, *, within: float = 10.0) -> list[RunListing]:
        """Every run announced in the DHT, as the entries claim it (and ours)."""
        return merge_entries(await self._records(within))

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

    async def find(self, query: str, fetch: Fetch, *, within: float = 10.0) -> list[Candidate]:
        """The runs `query` may mean: announced ones, their manifests fetched from announcers
        and verified, plus any run a connected peer serves under `query`. `fetch(peer, query)`
        asks one peer (RUN_LOOKUP) and returns (run ID, envelope) or None."""
        found: dict[str, Candidate] = {}
        everything = await self.listed(within=within)
        self.listed_names = sorted({r["name"] for r in everything})
        listings = [r for r in everything if matches(query, r["run_id"], r["name"])]
        for listing in listings[:MAX_CANDIDATES]:
            candidate = Candidate(
                listing["run_id"], listing["name"], listing["creator"], listing["mode"]
            )
            for peer in [p for p in listing["announced_by"] if p != self.peer_id][:3]:
                if await self._fetch_into(candidate, peer, listing["run_id"], fetch, query):
                    break
            # the creator's own signed entry stands behind its name even while unreachable
            if candidate.envelope is not None or listing["announced_by"][:1] == [
                listing["creator"]
            ]:
                found[candidate.run_id] = candidate
        peers = [p.to_base58() for p in self.host.get_connected_peers()][:MAX_PEERS_ASKED]
        answers: dict[str, tuple[str, bytes] | None] = {}

        async def ask(peer: str) -> None:
            answers[peer] = await fetch(peer, query)

        # at once: a peer busy starting (torch loading) holds its answer to the deadline, and
        # asking sixteen of those in turn took longer than a join waits
        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(ask, peer)
        for peer in peers:
            answer = answers.get(peer)
            if answer is None or answer[0] in found and found[answer[0]].envelope is not None:
                continue
            candidate = found.get(answer[0]) or Candidate(answer[0], "", "", "")
            if _verified(candidate, answer[1], query):
                candidate.seeds.add(peer)
                found[candidate.run_id] = candidate
        return list(found.values())

    async def _fetch_into(
        self, candidate: Candidate, peer: str, run_id: str, fetch: Fetch, query: str
    ) -> bool:
        answer = await fetch(peer, run_id)
        if answer is None or answer[0] != run_id or not _verified(candidate, answer[1], query):
            return False
        candidate.seeds.add(peer)
        return True


def _verified(candidate: Candidate, envelope: bytes, query: str) -> bool:
    """Fill `candidate` from `envelope` if it is the signed manifest of its run ID and the run
    is one `query` means (an announcer may lie about a run's name, never about its manifest)."""
    try:
        manifest: RunManifest = open_manifest(envelope, candidate.run_id)
    except PeertrainError as exc:
        log.info("a peer served a bad manifest for run %s: %s", candidate.run_id[:16], exc)
        return False
    if not matches(query, candidate.run_id, manifest.name):
        return False
    candidate.name, candidate.creator, candidate.mode = (
        manifest.name,
        manifest.creator,
        manifest.mode,
    )
    candidate.envelope = envelope
    return True


def ambiguous(query: str, candidates: list[Candidate]) -> ControlError:
    lines = "\n".join(f"  {c.describe()}" for c in candidates)
    return ControlError(
        f"{len(candidates)} runs are named {query!r}; name the one you mean by its ID "
        f"(at least {MIN_PREFIX} characters, e.g. --run {candidates[0].run_id[:12]}):\n{lines}"
    )
