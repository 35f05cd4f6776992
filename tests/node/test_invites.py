"""Invite runs from the control socket (issue 14): `run.invite` signs a certificate only where
the node may, `run.join --certificate` checks and carries it, `run.revoke` ends a membership on
every replica. Real in-process daemons on loopback; the CLI runs these in
tests/e2e/test_sybil_runs_cli.py."""

from __future__ import annotations

import pytest
from peertrain.node.api.control_methods import control_methods
from peertrain.node.errors import ControlError
from peertrain.testing import open_test_swarm, wait_until

SPEC = {
    "model": "mlp",
    "model_settings": {"hidden": 16, "depth": 1},
    "dataset": "digits",
    "inner_steps": 3,
    "rounds": 0,  # until stopped: the membership, not the training, is under test
    "batch_size": 16,
    "admission": "invite",
}


def pid(node) -> str:
    return node.identity.peer_id.to_base58()


async def test_invite_join_with_the_certificate_then_revoke(tmp_path):
    async with open_test_swarm(3) as (creator, member, stranger):
        session = await creator.runs.create(name="team", mode="diloco", spec=SPEC)
        await wait_until(lambda: session.driver is not None, timeout=30, what="the driver")
        invite = control_methods(creator)["run.invite"]
        with pytest.raises(ControlError, match="no peer ID"):
            await invite({"peer": "not-a-peer"})
        with pytest.raises(ControlError, match="duration"):
            await invite({"peer": pid(member), "expires": "soon"})
        token = (await invite({"peer": pid(member), "expires": "2h"}))["certificate"]

        with pytest.raises(ControlError, match="not this node"):  # someone else's certificate
            await stranger.runs.join(session.run_id, timeout=20, certificate=token)
        joined = await member.runs.join(session.run_id, timeout=20, certificate=token)
        admission = session.driver.admission
        await wait_until(lambda: pid(member) in session.state.members(), timeout=30)
        assert admission.role(pid(member)) == "member"
        await wait_until(lambda: joined.driver is not None, timeout=30, what="the member's driver")
        with pytest.raises(ControlError, match="creator or an admin"):  # a member certifies nobody
            await control_methods(member)["run.invite"]({"peer": pid(stranger)})

        revoked = await control_methods(creator)["run.revoke"]({"peer": pid(member)})
        assert revoked["revoked"] and not admission.admits(pid(member))
        assert pid(member) not in session.state.owners()
        # the revocation is the creator's signed delta: the member's own replica learns it too
        await wait_until(
            lambda: joined.driver.admission.revoked(pid(member)), timeout=30, what="replicated"
        )
        await wait_until(
            lambda: session.status()["dropped"]["deltas"] > 0, timeout=30, what="its next lease"
        )
        assert pid(member) not in session.state.owners()


async def test_an_open_run_takes_no_invites():
    async with open_test_swarm(1) as (node,):
        await node.runs.create(name="public", mode="diloco", spec={**SPEC, "admission": "open"})
        with pytest.raises(ControlError, match="open"):
            await control_methods(node)["run.invite"]({"peer": pid(node)})


async def test_a_swarm_pipeline_run_is_never_created_as_an_invite_run():
    """Pipeline runs have no invite admission (any peer with a member record may call a stage):
    asked for one, the node refuses by name and starts nothing, rather than create an open run
    its user believes closed."""
    async with open_test_swarm(1) as (node,):
        pipeline = {"model": "mlp", "dataset": "digits", "stages": 2, "admission": "invite"}
        with pytest.raises(ControlError, match="no 'invite' admission.*--mode diloco"):
            await control_methods(node)["run.create"](
                {"name": "p", "mode": "swarm", "spec": pipeline}
            )
        assert node.runs.sessions == {} and node.status()["run"] is None
