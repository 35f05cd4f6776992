"""Run listings in the DHT are claims: merged per run ID, the creator's own entry deciding the
labels, anything malformed skipped; a query means a run by name, whole ID or ID prefix."""

from __future__ import annotations

import pytest
from peertrain.dht import Record, runs_key
from peertrain.node.net.names import friendly_name
from peertrain.node.runs.directory import announce_entry, matches, merge_entries
from peertrain.node.runs.name_lookup import Candidate, ambiguous

CREATOR = "12D3KooWLSac7KgnrQGj1rQtmmqwDyfsW5XxVtSaXNRJfQMH2qWc"
MEMBER = "12D3KooWG5NkTJipRYC7hEWoYNwsfFCqgTUmkThVL8ct1cDckq2T"
RUN = "ab" * 32


def listing(**fields):
    base = {
        "run_id": RUN,
        "name": "twin",
        "creator": CREATOR,
        "creator_name": "",
        "mode": "diloco",
        "model": "gpt",
        "members": 1,
        "round": 3,
        "admission": "open",
        "announced_by": [],
    }
    return {**base, **fields}


def record(writer: str, value) -> Record:
    return Record(key=runs_key(), writer=writer, value=value, issued_at=0.0, expires_at=0.0)


def test_the_creators_entry_names_the_run_and_gives_its_counts():
    liar = announce_entry([listing(name="renamed", members=2**40 - 1, round=2**40 - 1)])
    own = announce_entry([listing(members=2, round=5)])
    [run] = merge_entries([record(MEMBER, liar), record(CREATOR, own)])
    assert run["name"] == "twin" and run["creator_name"] == friendly_name(CREATOR)
    assert (run["members"], run["round"]) == (2, 5)  # not the largest anyone claims
    assert run["announced_by"] == [CREATOR, MEMBER]


def test_once_the_manifest_names_the_creator_a_liar_naming_itself_creator_is_one_claim():
    liar = "12D3KooWzzzzliar"  # sorts after the creator: its claim came last and won
    claims = announce_entry([listing(creator=liar, name="mine", members=2**40 - 1, round=9)])
    own = announce_entry([listing(members=2, round=5)])
    records = [record(CREATOR, own), record(liar, claims)]
    [run] = merge_entries(records, true_creators={RUN: CREATOR})
    assert (run["name"], run["creator"], run["members"], run["round"]) == ("twin", CREATOR, 2, 5)
    assert run["announced_by"] == [CREATOR, liar]


def test_without_the_creators_entry_a_minority_of_liars_cannot_inflate_the_counts():
    honest = [announce_entry([listing(members=3, round=7)]) for _ in range(3)]
    liar = announce_entry([listing(members=2**40 - 1, round=2**40 - 1)])
    writers = [f"12D3KooWpeer{i}" for i in range(4)]
    [run] = merge_entries([record(w, v) for w, v in zip(writers, [*honest, liar], strict=True)])
    assert (run["members"], run["round"]) == (3, 7)


def test_malformed_entries_are_skipped_and_admission_defaults_to_open():
    bad = [
        {"runs": [{"run_id": "not hex!", "name": "x"}]},
        {"runs": [{**listing(), "members": -1}]},
        {"runs": "nope"},
        ["not", "a", "map"],
        {"runs": [{**listing(run_id="cd" * 32), "admission": None, "name": "y" * 65}]},
    ]
    assert merge_entries([record(MEMBER, value) for value in bad]) == []
    entry = announce_entry([listing()])
    del entry["runs"][0]["admission"]
    [run] = merge_entries([record(CREATOR, entry)])
    assert run["admission"] == "open"


def test_a_run_is_meant_by_its_name_its_id_or_an_id_prefix_of_eight_hex_characters():
    assert matches("twin", RUN, "twin") and matches(RUN, RUN, "twin")
    assert matches(RUN[:8], RUN, "twin") and matches(RUN[:8].upper(), RUN, "twin")
    assert not matches(RUN[:7], RUN, "twin")  # too short to name a run
    assert not matches("twin2", RUN, "twin")


def test_an_ambiguous_name_lists_every_candidate_with_its_creator_and_mode():
    a = Candidate(RUN, "twin", CREATOR, "diloco")
    b = Candidate("cd" * 32, "twin", MEMBER, "swarm")
    text = str(ambiguous("twin", [a, b]))
    assert "2 runs are named 'twin'" in text
    assert RUN[:16] in text and "cd" * 8 in text
    assert friendly_name(CREATOR) in text and friendly_name(MEMBER) in text
    assert "diloco" in text and "swarm" in text


async def serve_manifest(creator, name: str):
    """`creator` (a test swarm node) signs a run manifest named `name` and answers run lookups
    with it, as a node holding the run does; returns the manifest."""
    from peertrain.crdt.manifest import RunManifest, sign_manifest
    from peertrain.node.net.rpc import RpcServer
    from peertrain.node.runs.run_lookup import RUN_LOOKUP, RunFound, RunLookup
    from peertrain.protocol.packing import pack

    services = creator.services
    manifest = RunManifest(
        creator=services.peer_id, created_ms=1, name=name, mode="diloco", spec=pack({})
    )
    envelope = sign_manifest(services.identity.key_pair, manifest)

    async def answer(peer, req: RunLookup):
        return req.reply(RunFound, run_id=manifest.run_id, manifest=envelope)

    RpcServer(
        services.host, RUN_LOOKUP, RunLookup, answer, scoreboard=services.scoreboard
    ).register()
    return manifest


async def test_one_fake_listing_cannot_block_a_join_by_name():
    """A stranger's DHT entry names itself the creator of a run called `twin` and serves no
    manifest: a claim. It used to count as a candidate, so `join --run twin` refused as
    ambiguous beside the real run; only runs whose manifest verifies are candidates now."""
    import trio
    from peertrain.testing import open_test_swarm

    async with open_test_swarm(3) as (creator, faker, victim):
        manifest = await serve_manifest(creator, "twin")
        fake = listing(run_id="cd" * 32, creator=faker.services.peer_id, members=2**40 - 1)
        with trio.fail_after(20):
            await faker.services.dht.dht.put(runs_key(), announce_entry([fake]), ttl=600)
            while not any(  # noqa: ASYNC110 - the DHT has no event for a record's arrival
                r["run_id"] == fake["run_id"] for r in await victim.runs.directory.listed()
            ):
                await trio.sleep(0.2)
            run_id, _, seeds = await victim.runs.finder.find_one("twin", within=10)
        assert run_id == manifest.run_id and creator.services.peer_id in seeds


async def test_run_list_shows_only_runs_whose_manifest_verifies_labelled_by_it():
    """`run list` showed every DHT entry's claim: a run that does not exist, and a real run
    under a liar's name, creator and counts. Now a listing is fetched by run ID from its
    announcers and shown only once its manifest verifies, with the manifest's labels."""
    import trio
    from peertrain.testing import open_test_swarm

    async with open_test_swarm(3) as (creator, liar, victim):
        services = creator.services
        manifest = await serve_manifest(creator, "twin")
        real = listing(run_id=manifest.run_id, creator=services.peer_id, members=2, round=4)
        lies = [
            listing(run_id="cd" * 32, name="ghost", creator=liar.services.peer_id),
            listing(run_id=manifest.run_id, name="renamed", creator=liar.services.peer_id),
        ]
        with trio.fail_after(30):
            await services.dht.dht.put(runs_key(), announce_entry([real]), ttl=600)
            await liar.services.dht.dht.put(runs_key(), announce_entry(lies), ttl=600)
            while len(await victim.runs.directory.listed()) < 2:  # noqa: ASYNC110 - no event
                await trio.sleep(0.2)
            shown = await victim.runs.directory.list_runs()
        assert [r["run_id"] for r in shown] == [manifest.run_id]  # no ghost
        [run] = shown
        assert (run["name"], run["creator"]) == ("twin", services.peer_id)
        assert (run["members"], run["round"]) == (2, 4)  # the creator's own entry's counts


async def test_a_misspelt_run_name_is_refused_at_once_with_the_names_it_may_mean():
    """It cost the whole join timeout (60 s) before "no peer knows…", with no suggestion,
    then 10 s, though `run list` answers in a fraction of a second: a name next to a listed
    one is a typo, answered as soon as the listing and the connected peers say no."""
    import trio
    from peertrain.node.errors import ControlError
    from peertrain.testing import open_test_swarm

    async with open_test_swarm(2) as (lister, victim):
        entry = announce_entry([listing(name="stdlib-gpt", creator=lister.services.peer_id)])
        await lister.services.dht.dht.put(runs_key(), entry, ttl=600)
        started = trio.current_time()
        with pytest.raises(ControlError, match=r"did you mean 'stdlib-gpt'\?"):
            await victim.runs.finder.find_one("stdlib-gtp", within=60)
        assert trio.current_time() - started < 3
