"""Finding the one run a user means among peers, and fetching its signed manifest.

`/peertrain/run/lookup/1.0.0` asks a peer for a run by name, ID or ID prefix; the answer is a
signed manifest that the asker verifies against the run ID (a peer cannot forge a run, only
fail to serve one). `RunFinder.find_one` gathers every candidate (name_lookup.py: DHT entries
and connected peers) and answers only when exactly one run is meant: a name that several runs
carry is refused with the list, because silently picking one let a squatter take a joiner over.
"""

from __future__ import annotations

import difflib
import logging
from typing import Annotated

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Request, Response, message
from peertrain.protocol.schema import MaxLen

from ..errors import ControlError, NodeError
from ..net.rpc import request
from ..services.dht import DhtService
from .directory import RunDirectory
from .name_lookup import ambiguous, find_candidates

log = logging.getLogger(__name__)

RUN_LOOKUP = protocol_id("run/lookup", "1.0.0")
UNKNOWN_AFTER = 10.0  # seconds a name is looked for while the DHT lists only other runs


@message("node/run-lookup", max_size=512)
class RunLookup(Request):
    name: Annotated[str, MaxLen(128)]  # a run name, a run ID or an ID prefix


@message("node/run-found", max_size=200 * 1024)
class RunFound(Response):
    run_id: Annotated[str, MaxLen(128)]
    manifest: Annotated[bytes, MaxLen(160 * 1024)]


class RunFinder:
    def __init__(self, dht: DhtService, host: IHost, directory: RunDirectory) -> None:
        self.dht, self.host, self.directory = dht, host, directory

    async def find_one(self, query: str, *, within: float) -> tuple[str, bytes, set[str]]:
        """The one run `query` means: (run ID, verified envelope, peers that served it).
        ControlError listing the candidates when several runs match, or none within `within`."""
        with trio.move_on_after(min(within, 10.0)):  # a DHT without peers yet knows no runs
            await self.dht.wait_bootstrapped()
        nothing_since: float | None = None
        with trio.move_on_after(within):
            while True:
                candidates = await find_candidates(self.directory, self.host, query, self.fetch)
                nothing_since = self._unknown(query, candidates, nothing_since)
                # a listing whose manifest nobody served is a claim: it cannot make a name
                # ambiguous (one fake entry naming itself creator blocked every join by name)
                verified = [c for c in candidates if c.envelope is not None]
                if len(verified) > 1:
                    raise ambiguous(query, verified)
                if verified:
                    found = verified[0]
                    assert found.envelope is not None
                    return found.run_id, found.envelope, found.seeds
                await trio.sleep(0.5)
        raise ControlError(
            f"no peer knows a run named or with ID {query!r} (after {within:.0f} s)"
            + self._near(query)
        )

    def _unknown(self, query: str, candidates: list, since: float | None) -> float | None:
        """Give up early on a name nobody knows: the DHT lists other runs (it works) and none
        matched, at once when a listed name is a near miss of `query` (a typo: `run list`
        answers in a fraction of a second, and a join that cannot succeed should too), else
        after `UNKNOWN_AFTER` seconds (a run just created is listed within seconds), as for a
        name only unverified entries list (not a typo of itself). It cost a whole join timeout
        (60 s) before. Returns when the listings first said nothing, or
        raises."""
        if candidates or not self.directory.listed_names:
            return None
        now = trio.current_time()
        waited = since is not None and now - since >= UNKNOWN_AFTER
        if query in self.directory.listed_names:  # listed so, by entries that did not verify
            if waited:
                raise ControlError(
                    f"runs named {query!r} are listed, but no peer served a manifest of one "
                    f"that verifies (after {UNKNOWN_AFTER:.0f} s); `peertrain run list` shows "
                    "the runs that do"
                )
            return now if since is None else since
        if self._near_names(query)[:1] or waited:
            raise ControlError(f"no run named or with ID {query!r} is listed" + self._near(query))
        return now if since is None else since

    def _near_names(self, query: str) -> list[str]:
        names = [n for n in self.directory.listed_names if n != query]
        return difflib.get_close_matches(query, names, n=3)

    def _near(self, query: str) -> str:
        near = self._near_names(query)
        if near:
            return f"; did you mean {', '.join(map(repr, near))}? (`peertrain run list`)"
        return "; `peertrain run list` shows the runs the DHT lists"

    async def fetch(self, peer: str, query: str) -> tuple[str, bytes] | None:
        """Ask `peer` (connecting through the DHT if need be) for the run `query`; the caller
        verifies what comes back."""
        target = ID.from_base58(peer)
        if target not in self.host.get_connected_peers():
            try:
                await self.dht.resolve_peer(peer, timeout=5.0)
            except NodeError as exc:
                log.debug("run lookup: cannot reach %s: %s", peer, exc)
                return None
        try:
            reply = await request(
                self.host, target, RUN_LOOKUP, RunLookup(name=query), RunFound, timeout=5.0
            )
        except (PeertrainError, trio.TooSlowError) as exc:
            # a peer that hangs up mid-answer (rpc raises StreamEnded), does not know the run
            # or is too slow: the caller asks the next one
            log.debug("run lookup at %s: %r", peer, exc)
            return None
        return reply.run_id, reply.manifest
