"""`peertrain status` for people: one line per SWARM run role, and the whole node summary."""

from __future__ import annotations

from peertrain.node.cli.status_text import diffusion_lines, render_status, swarm_line


def test_a_server_line_names_its_stage_and_speed():
    run = {
        "role": "server",
        "phase": "serving",
        "stage": 1,
        "throughput": 123.45,
        "calls": 40,
        "steps": 3,
        "stage_sizes": [2, 1, 2],
    }
    assert (
        swarm_line(run)
        == "server (serving)  serving stage 1  123.5 samples/s  40 calls  3 steps  stages 2/1/2"
    )


def test_a_trainer_line_shows_progress_loss_and_losses():
    run = {
        "role": "trainer",
        "phase": "swarm",
        "completed": 150,
        "throughput": 80.0,
        "loss": 0.91234,
        "lost_microbatches": 0,
        "stage_sizes": [2, 2, 2],
    }
    assert (
        swarm_line(run)
        == "trainer (swarm)  150 microbatches  80.0 samples/s  loss 0.9123  lost 0  stages 2/2/2"
    )


def test_a_session_still_starting_has_a_line_too():
    assert swarm_line({"role": "server", "phase": "starting", "stage_sizes": [1, 0]}) == (
        "server (starting)  loading the model  stages 1/0"
    )


def test_the_node_summary_shows_identity_reachability_run_and_named_peers():
    status = {
        "name": "brave-otter",
        "peer_id": "12D3KooWAAA",
        "share": "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWAAA",
        "uptime_s": 61.7,
        "reachability": {"text": "public"},
        "run": {
            "name": "lm",
            "mode": "diloco",
            "run_id": "0123456789abcdef",
            "round": 7,
            "loss": 1.23456,
            "members": ["a", "b", "c"],
            "phase": "inner steps",
        },
        "peers": ["12D3KooWBBB"],
        "peer_names": {"12D3KooWBBB": "calm-heron"},
    }
    assert render_status(status).splitlines() == [
        "brave-otter  12D3KooWAAA",
        "  give others  /ip4/127.0.0.1/tcp/4001/p2p/12D3KooWAAA",
        "  uptime       62 s",
        "  reachable    public",
        "  run          lm (diloco, 0123456789ab…)",
        "    round 7  loss 1.2346  members 3  phase inner steps",
        "  peers        1",
        "    calm-heron  12D3KooWBBB",
    ]


def test_a_node_without_a_run_says_so():
    status = {
        "name": "n",
        "peer_id": "p",
        "share": "s",
        "uptime_s": 0,
        "run": None,
        "peers": [],
        "peer_names": {},
    }
    assert "  run          -" in render_status(status).splitlines()


def test_a_bootstrap_peer_that_refuses_our_key_is_named_instead_of_asking_for_more_peers():
    """The refused node was told to "connect to more peers (--bootstrap)": it has one, and
    that one refuses its pre-shared key."""
    why = (
        "could not connect to 12D3KooWBBB: pre-shared key mismatch: the peer is not in this "
        "private network (check --psk on both sides)"
    )
    status = {
        "name": "n",
        "peer_id": "p",
        "share": "s",
        "uptime_s": 0,
        "reachability": {
            "status": "unknown",
            "text": "reachability not known yet: 0 of the 2 peers needed answered the dial-back "
            "check; connect to more peers (--bootstrap) to find out",
        },
        "bootstrap_failures": {"12D3KooWBBB": why},
        "run": None,
        "peers": [],
        "peer_names": {},
    }
    lines = render_status(status).splitlines()
    assert f"  bootstrap    {why}" in lines
    assert not any("--bootstrap" in line for line in lines)


def test_a_diffusion_run_shows_every_groups_members_steps_and_loss():
    run = {
        "group": "expert-0",
        "phase": "inner steps",
        "round": 3,
        "router_accuracy": None,
        "groups": {
            "expert-0": {"members": ["a", "b"], "steps": 48, "round": 3, "loss": 0.51234},
            "router": {"members": [], "steps": 0, "round": None, "loss": None},
        },
    }
    assert diffusion_lines(run) == [
        "training expert-0 (inner steps)  round 3",
        "  expert-0   members 2  steps 48  round 3  loss 0.5123",
        "  router     members 0  steps 0  round -  loss -",
    ]


def test_a_node_in_several_runs_shows_each_runs_round_of_rounds_loss_phase_and_state():
    """It printed `run 3` and nothing else: the per-run lines showed only under `--watch`."""

    def run(name: str, round_: int, checksum: str) -> dict:
        return {
            "name": name,
            "mode": "diloco",
            "run_id": name * 8,
            "round": round_,
            "loss": 2.0,
            "members": ["a", "b"],
            "phase": "exchanging",
            "state_checksum": checksum,
            "progress": {"rounds": 30},
        }

    status = {
        "name": "n",
        "peer_id": "p",
        "share": "s",
        "uptime_s": 5,
        "run": {"runs": [run("lm", 7, "ab12cd34ef56aa"), run("cv", 2, "99887766554433")]},
        "peers": [],
        "peer_names": {},
    }
    lines = render_status(status).splitlines()
    assert "  run          lm (diloco, lmlmlmlmlmlm…)" in lines
    assert (
        "    round 7 of 30  loss 2.0000  members 2  phase exchanging  state ab12cd34ef56" in lines
    )
    assert (
        "    round 2 of 30  loss 2.0000  members 2  phase exchanging  state 998877665544" in lines
    )
