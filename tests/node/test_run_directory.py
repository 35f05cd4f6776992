"""Run listings in the DHT are claims: merged per run ID, the creator's own entry deciding the
labels, anything malformed skipped; a query means a run by name, whole ID or ID prefix."""

from __future__ import annotations

from peertrain.dht import Record, runs_key
from peertrain.node.net.names import friendly_name
from peertrain.node.runs.directory import (
    Candidate,
    ambiguous,
    announce_entry,
    matches,
    merge_entries,
)

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


def test_the_creators_entry_names_the_run_and_counts_are_the_largest_reported():
    liar = announce_entry([listing(name="renamed", members=9, round=2)])
    own = announce_entry([listing(members=2, round=5)])
    [run] = merge_entries([record(MEMBER, liar), record(CREATOR, own)])
    assert run["name"] == "twin" and run["creator_name"] == friendly_name(CREATOR)
    assert (run["members"], run["round"]) == (9, 5)
    assert run["announced_by"] == [CREATOR, MEMBER]


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
