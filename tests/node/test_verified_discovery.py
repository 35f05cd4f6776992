"""Discovery shows runs, not claims (issue 29, item 2): listings are verified by their manifest,
fetched by run ID from their writers; a writer that serves a forged manifest or mislabels a
verified run is penalised (an unreachable one is not); a join by name looks at verified and
untried listings before those that failed; what is hidden is counted and counts say whose they
are. Real daemons on loopback."""

from __future__ import annotations

import pytest
import trio
from peertrain.dht import runs_key
from peertrain.node.cli.status_text import render_runs
from peertrain.node.runs.directory import announce_entry, merge_entries
from peertrain.testing import open_test_swarm

from .test_run_directory import CREATOR, MEMBER, listing, record, serve_manifest


async def put(node, runs: list) -> None:
    await node.services.dht.dht.put(runs_key(), announce_entry(runs), ttl=600)


async def wait_listed(node, count: int) -> None:
    while len(await node.runs.directory.listed()) < count:  # noqa: ASYNC110 - no event
        await trio.sleep(0.2)


async def test_forged_same_name_listings_that_sort_first_cannot_hide_the_real_run_from_a_join(
    monkeypatch,
):
    """Eight fake runs named `twin` whose IDs sort before the real one filled the eight
    candidates a join fetched, so a joiner that reached the run only through the DHT (its
    connected peers all the attacker's: asked none here) never fetched the real manifest and
    gave up. Listings that failed now wait behind untried ones, and those fetch at once."""
    from peertrain.node.runs import name_lookup

    monkeypatch.setattr(name_lookup, "MAX_PEERS_ASKED", 0)
    async with open_test_swarm(3) as (creator, faker, victim):
        manifest = await serve_manifest(creator, "twin")
        me = creator.services.peer_id
        fakes = [listing(run_id=f"{i:064x}", creator=faker.services.peer_id) for i in range(8)]
        with trio.fail_after(45):
            await put(creator, [listing(run_id=manifest.run_id, creator=me)])
            await put(faker, fakes)
            await wait_listed(victim, 9)
            run_id, _, seeds = await victim.runs.finder.find_one("twin", within=20)
        assert run_id == manifest.run_id and me in seeds
        assert victim.services.scoreboard.score(faker.services.peer_id) == 0  # only unreachable


async def serve_forgery(liar, run_id: str) -> None:
    """`liar` answers every run lookup with its own signed manifest under `run_id`: bytes that
    cannot hash to it."""
    from peertrain.crdt.manifest import RunManifest, sign_manifest
    from peertrain.node.net.rpc import RpcServer
    from peertrain.node.runs.run_lookup import RUN_LOOKUP, RunFound, RunLookup
    from peertrain.protocol.packing import pack

    services = liar.services
    forged = RunManifest(
        creator=services.peer_id, created_ms=1, name="x", mode="diloco", spec=pack({})
    )
    envelope = sign_manifest(services.identity.key_pair, forged)

    async def answer(peer, req: RunLookup):
        return req.reply(RunFound, run_id=run_id, manifest=envelope)

    RpcServer(
        services.host, RUN_LOOKUP, RunLookup, answer, scoreboard=services.scoreboard
    ).register()


async def test_a_forged_manifest_or_a_renamed_run_costs_its_writer_and_hidden_runs_are_counted():
    """`run list` dropped a ghost run quietly and its writer went on: a writer whose entry
    serves bytes that are no manifest of the run ID, or names a verified run otherwise than its
    manifest does, is penalised; one that merely serves nothing is not; the listing says how
    many listed runs it left out."""
    async with open_test_swarm(4) as (creator, forger, renamer, victim):
        manifest = await serve_manifest(creator, "twin")
        await serve_forgery(forger, "cd" * 32)
        me = creator.services.peer_id
        with trio.fail_after(45):
            await put(creator, [listing(run_id=manifest.run_id, creator=me, members=2, round=4)])
            await put(
                forger, [listing(run_id="cd" * 32, name="ghost", creator=forger.services.peer_id)]
            )
            await put(
                renamer,
                [
                    listing(run_id=manifest.run_id, name="renamed", creator=me),
                    listing(run_id="ef" * 32, name="nothing", creator=renamer.services.peer_id),
                ],
            )
            await wait_listed(victim, 3)
            survey = await victim.runs.directory.survey()
        assert [r["run_id"] for r in survey["runs"]] == [manifest.run_id]
        assert (survey["unverified"], survey["unchecked"]) == (2, 0)
        board = victim.services.scoreboard
        assert board.score(forger.services.peer_id) > 0  # served a forgery
        assert board.score(renamer.services.peer_id) > 0  # renamed a verified run
        assert board.score(me) == 0
        blamed = board.score(renamer.services.peer_id)
        again = await victim.runs.directory.survey()  # each lie is blamed once, not per listing
        assert again["runs"] == survey["runs"]
        assert board.score(renamer.services.peer_id) <= blamed


def test_counts_say_whether_the_creator_reported_them_or_members_claimed_them():
    own = announce_entry([listing(members=2, round=5)])
    [run] = merge_entries([record(CREATOR, own)])
    assert (run["members"], run["round"], run["counts_from"]) == (2, 5, "creator")
    claim = announce_entry([listing(members=3, round=7)])
    [run] = merge_entries([record(MEMBER, claim)])
    assert run["counts_from"] == "claims"
    text = render_runs([run], unverified=3, unchecked=1)
    assert "~3" in text and "~7" in text and "claimed" in text
    assert "3 listed runs not shown" in text and "1 not checked yet" in text


async def test_announcers_that_sort_first_and_serve_nothing_cannot_hide_a_run_from_run_list(
    monkeypatch,
):
    """Announcers were asked in the order their IDs sort, three of them: five writers that
    list the run, sort first and serve nothing made it fail every check. The creator is asked
    first; the rest in a new random order each time."""
    from peertrain.crdt.manifest import RunManifest
    from peertrain.node.runs import verified_listings

    manifest = RunManifest(creator=CREATOR, created_ms=1, name="twin", mode="diloco", spec=b"")
    monkeypatch.setattr(verified_listings, "open_manifest", lambda raw, run_id: manifest)
    liars = [f"12D3KooW{'1' * i}" for i in range(1, 6)]  # sort before the member
    run = listing(run_id=manifest.run_id, announced_by=[*liars, MEMBER])

    async def fetch(peer: str, run_id: str):
        return (run_id, b"the manifest") if peer == MEMBER else None

    shown = 0
    for _ in range(20):  # 20 nodes listing once each: P(the member asked) = 1/2 each
        listings = verified_listings.VerifiedListings("me", lambda *_: ("mlp", "open"))
        listings.fetch = fetch
        await listings.check([run], set(), within=5)
        shown += len(listings.keep([run], set()))
    assert shown >= 3


async def test_a_name_listed_only_by_unverified_entries_is_no_typo_of_itself(monkeypatch):
    """A join by a name that only a forged entry lists (no manifest served) was refused at once
    as a typo: "did you mean 'twin'?". It now waits the time a name nobody knows gets, and
    says the listed runs of that name did not verify."""
    from peertrain.node.errors import ControlError
    from peertrain.node.runs import run_lookup

    monkeypatch.setattr(run_lookup, "UNKNOWN_AFTER", 1.0)
    async with open_test_swarm(2) as (faker, victim):
        await put(faker, [listing(run_id="cd" * 32)])  # names someone else its creator
        with trio.fail_after(30):
            await wait_listed(victim, 1)
            started = trio.current_time()
            with pytest.raises(ControlError) as refused:
                await victim.runs.finder.find_one("twin", within=20)
        assert "did you mean" not in str(refused.value)
        assert "verif" in str(refused.value) and trio.current_time() - started >= 1.0
