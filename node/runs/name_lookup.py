"""The runs a name, ID or ID prefix may mean: listed runs whose manifests verify, and runs that
connected peers serve under it.

A listing is a stranger's claim; a candidate is a run whose signed manifest some peer served
and which verifies against its run ID. Listings are tried verified first, then untried, and
those whose manifests nobody served lately last (verified_listings.py): eight fake runs under a
name, with IDs that sort first, filled the eight candidates a join fetched, so a joiner that
reached the run only through the DHT never fetched the real one. Fetches run side by side under
one deadline (one at a time, eight unreachable announcers held a join for a minute).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
from libp2p.abc import IHost
from peertrain.crdt.manifest import RunManifest, open_manifest
from peertrain.protocol.errors import PeertrainError

from ..errors import ControlError
from ..net.names import friendly_name
from .directory import MIN_PREFIX, RunDirectory, RunListing, matches

log = logging.getLogger(__name__)

MAX_CANDIDATES = 8  # listed runs a join fetches manifests of, each time it looks
MAX_PEERS_ASKED = 16  # connected peers a join asks directly
Fetch = Callable[[str, str], Awaitable[tuple[str, bytes] | None]]


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


async def find_candidates(
    directory: RunDirectory, host: IHost, query: str, fetch: Fetch, *, within: float = 10.0
) -> list[Candidate]:
    """The runs `query` may mean: listed ones whose manifests an announcer served and that
    verify, plus any run a connected peer serves under `query`. `fetch(peer, query)` asks one
    peer (RUN_LOOKUP) and returns (run ID, envelope) or None."""
    everything = await directory.listed(within=within)
    directory.listed_names = sorted({r["name"] for r in everything})
    listings = [r for r in everything if matches(query, r["run_id"], r["name"])]
    found: dict[str, Candidate] = {}
    with trio.move_on_after(within):
        async with trio.open_nursery() as nursery:
            for listing in directory.verified.first(listings)[:MAX_CANDIDATES]:
                nursery.start_soon(_from_listing, directory, listing, query, found)
    peers = [p.to_base58() for p in host.get_connected_peers()][:MAX_PEERS_ASKED]
    await _ask_connected(peers, query, fetch, found)
    return list(found.values())


async def _from_listing(
    directory: RunDirectory, listing: RunListing, query: str, found: dict[str, Candidate]
) -> None:
    run_id = listing["run_id"]
    served = await directory.verified.fetch_manifest(listing)
    if served is not None:
        peer, envelope, manifest = served
        if matches(query, run_id, manifest.name):  # an announcer may lie about the name
            candidate = Candidate.of(run_id, manifest)
            candidate.envelope = envelope
            candidate.seeds.add(peer)
            found[run_id] = candidate
    elif listing["announced_by"][:1] == [listing["creator"]]:
        # the creator's own signed entry stands behind its name while unreachable: the join
        # waits for it rather than saying nobody knows the name (it cannot be joined yet,
        # nor make the name ambiguous: it has no manifest)
        found.setdefault(
            run_id, Candidate(run_id, listing["name"], listing["creator"], listing["mode"])
        )


async def _ask_connected(
    peers: list[str], query: str, fetch: Fetch, found: dict[str, Candidate]
) -> None:
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


def _verified(candidate: Candidate, envelope: bytes, query: str) -> bool:
    """Fill `candidate` from `envelope` if it is the signed manifest of its run ID and the run
    is one `query` means (a peer may answer with another run, never with a forged manifest)."""
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
