"""The run-wide view (node/runs/run_view.py) and `run show`'s table of it (node/cli/run_show.py):
every live member's own report, the agreement at the newest round, summed speed and an ETA."""

from __future__ import annotations

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.member_report import MemberReport
from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter
from peertrain.node.cli.run_show import show
from peertrain.node.runs.run_view import run_view
from peertrain.testing.crdt_network import new_run

NOW = 1_800_000_000_000


def _id() -> str:
    return ID.from_pubkey(create_new_key_pair().public_key).to_base58()


def _run(reports: dict[str, MemberReport | None], groups: dict[str, str] | None = None):
    run_id, _ = new_run(create_new_key_pair())
    state = RunState(run_id, wall_ms=lambda: NOW)  # every member's writes, as after replication
    for peer, report in reports.items():
        role = (groups or {}).get(peer, "diloco")
        RunWriter(state, peer).announce(role=role, addrs=[], lease_ms=30_000, report=report)
    return state


def _report(round_: int, checksum: str, speed: float, name: str = "") -> MemberReport:
    return MemberReport(
        round=round_, checksum=checksum, samples_per_s=speed, device="cpu", version="1.2", name=name
    )


def test_the_view_lists_every_member_newest_round_first_with_ours_marked_and_others_claimed():
    me, b, c, old = _id(), _id(), _id(), _id()
    state = _run(
        {
            me: _report(5, "aaaa", 100.0, "alice"),
            b: _report(5, "aaaa", 50.5, "bob"),
            c: _report(4, "cccc", 25.0),
            old: None,  # a member of an older version: no report, still a member
        }
    )
    view = run_view(state, me=me, rounds=8, seconds_per_round=10.0)
    assert [r["peer"] for r in view["members"]] == [me, *sorted([b]), c, old]
    mine = view["members"][0]
    assert mine["me"] and not mine["claimed"] and mine["name"] == "alice"
    assert all(r["claimed"] for r in view["members"][1:])
    assert view["members"][-1]["round"] is None and view["members"][-1]["samples_per_s"] is None
    assert view["agreement"] == {
        "round": 5,
        "checksum": "aaaa",
        "holders": 2,
        "at_round": 2,
        "reporting": 3,
        "groups": 1,
    }
    assert view["samples_per_s"] == 175.5 and view["total"] == 4
    assert view["eta_s"] == 30.0  # three rounds left at ten seconds each


def test_a_split_at_the_newest_round_is_counted_and_an_endless_run_has_no_eta():
    me, b, c = _id(), _id(), _id()
    state = _run(
        {me: _report(3, "aaaa", 1.0), b: _report(3, "bbbb", 1.0), c: _report(3, "bbbb", 1)}
    )
    view = run_view(state, me=me, rounds=0, seconds_per_round=10.0, limit=2)
    assert view["agreement"]["checksum"] == "bbbb" and view["agreement"]["holders"] == 2
    assert view["eta_s"] is None
    assert len(view["members"]) == 2 and view["total"] == 3
    starting = run_view(state, me=me, rounds=None, seconds_per_round=None)  # no driver yet
    heading = show({"run_id": "ab" * 32, "name": "x", "mode": "diloco", **starting})
    assert " · round 3 · " in heading.splitlines()[0] and starting["eta_s"] is None
    assert "… and" not in heading  # every row shown


def test_run_show_prints_the_table_with_agreement_at_a_glance():
    me, b, c = _id(), _id(), _id()
    state = _run(
        {
            me: _report(5, "3fa2c1d09b8e7a65", 100.0, "alice's GPU"),
            b: _report(5, "3fa2c1d09b8e7a65", 50.0),
            c: _report(4, "0123456789abcdef", 25.0),
        }
    )
    view = {"run_id": "ab" * 32, "name": "demo", "mode": "diloco"}
    view.update(run_view(state, me=me, rounds=8, seconds_per_round=20.0))
    text = show(view)
    lines = text.splitlines()
    assert lines[0] == (
        f"run demo ({'ab' * 8}…) · diloco · 3 members · round 5 of 8 · ETA 1 min 0 s · "
        "175 samples/s in all (claimed)"
    )
    assert lines[1] == (
        "agreement: 2 of 2 members at round 5 hold state 3fa2c1d09b8e7a65; 1 at earlier rounds"
    )
    header = lines[3].split()
    assert header == ["PEER", "NAME", "ROUND", "CHECKSUM", "SAMPLES/S", "DEVICE", "VERSION"]
    assert lines[4].startswith("* ") and "alice's GPU" in lines[4] and f"{me[:8]}…" in lines[4]
    assert "0123456789abcdef" in lines[6] and " 4 " in lines[6]
    assert lines[-1].startswith("* this node; the other rows are each member's own signed claim")


def test_a_diffusion_runs_groups_each_agree_on_their_own_model_at_their_own_pace():
    """Two expert groups: each holds its own state, at its own round. All agree within their
    group; one member of expert-1 holds another state at its group's newest round."""
    me, b, c, d, e = (_id() for _ in range(5))
    groups = {me: "expert-0", b: "expert-0", c: "expert-1", d: "expert-1", e: "expert-1"}
    state = _run(
        {
            me: _report(7, "aaaa", 10.0),
            b: _report(7, "aaaa", 10.0),
            c: _report(5, "cccc", 10.0),
            d: _report(5, "cccc", 10.0),
            e: _report(5, "eeee", 10.0),
        },
        groups,
    )
    view = run_view(state, me=me, rounds=10, seconds_per_round=1.0)
    assert view["agreement"] == {
        "round": 7, "checksum": "", "holders": 4, "at_round": 5, "reporting": 5, "groups": 2
    }  # fmt: skip
    assert {r["peer"]: r["group"] for r in view["members"]} == groups
    text = show({"run_id": "ab" * 32, "name": "dd", "mode": "diffusion", **view})
    lines = text.splitlines()
    assert lines[1] == (
        "agreement: 4 of 5 members at their group's newest round hold their group's state "
        "(2 groups), 1 hold another state"
    )
    assert lines[3].split()[:4] == ["PEER", "NAME", "GROUP", "ROUND"]
    assert "expert-1" in text and "expert-0" in text
