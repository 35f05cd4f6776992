"""A member of an expert group that no trusted signer trains starts from the group's newest state.

DiLoCo adopts a state by download only on a trusted signer's word (the run's creator, its
anchors), and in a diffusion run those train one group or two: every other group would send a
joiner, or a member restarted behind its group, back to its own (initial) weights for good. Such a
member instead fetches the newest state its group's live members mirror into the run-wide
RunState (what samplers use, swarm/diffusion/groups.py `seed_state`), checks it like a sampler
does (size, finite values) and writes it as its own newest checkpoint, from which the DiLoCo
driver resumes. A fetch that fails or a bad state leaves the member where it was.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from peertrain.protocol.errors import PeertrainError

from ..services.tensor_fetch import fetch_tensor
from .peer_addrs import reach

if TYPE_CHECKING:
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec

    from .context import RunContext

log = logging.getLogger(__name__)

SEED_TIMEOUT = 60.0  # seconds for the state's download (a dit-tiny state is about 2 MB)
SEED_PENALTY = 20  # points for a provider of a state that fails its checks


async def seed_from_group(
    context: RunContext,
    spec: DiffusionSpec,
    group: str,
    directory: Path,
    *,
    checkpoint_tag: str,
) -> int | None:
    """Write the group's newest state into our checkpoints in `directory` when we have none as
    new and no trusted signer trains the group; the round written, or None."""
    from peertrain.swarm.diffusion.groups import seed_state
    from peertrain.swarm.diloco.member.checkpoint import CheckpointStore

    node, state = context.node, context.state
    manifest = state.manifest
    if manifest is None:
        return None
    newest = seed_state(state, spec, group, node.peer_id, creator=manifest.creator)
    if newest is None or newest.round == 0:
        return None
    room = node.budget.check_disk if node.budget else None
    store = CheckpointStore(directory, keep=2, room=room)
    own = await trio.to_thread.run_sync(store.latest)
    if own is not None and own[0].round >= newest.round:
        return None
    member_state = await _fetch(context, spec, group, newest)
    if member_state is None:
        return None
    await trio.to_thread.run_sync(lambda: store.save(member_state, manifest_hash=checkpoint_tag))
    log.info("%s: starting from its members' state of round %d", group, newest.round)
    return newest.round


async def _fetch(context: RunContext, spec: DiffusionSpec, group: str, newest):
    """The checked MemberState of `newest`, or None (logged; bad providers penalised)."""
    node, state = context.node, context.state
    from peertrain.swarm.diffusion.errors import DiffusionError
    from peertrain.swarm.diffusion.group_member import member_state_of, state_numel

    numel = await trio.to_thread.run_sync(state_numel, spec, group)
    try:
        with trio.fail_after(SEED_TIMEOUT):
            holders = await reach(node.host, state, newest.providers)
            download = await fetch_tensor(
                node.host,
                holders,
                newest.checksum,
                max_nbytes=4 * numel,
                scoreboard=node.scoreboard,
                budget=node.budget,
            )
            flat = await trio.to_thread.run_sync(download.finish)
    except (PeertrainError, trio.TooSlowError) as exc:
        log.warning("%s: its newest state could not be fetched (%s)", group, exc)
        return None
    try:
        return await trio.to_thread.run_sync(member_state_of, spec, group, flat, newest.round)
    except DiffusionError as exc:
        for peer in newest.providers:
            node.scoreboard.penalise(peer, SEED_PENALTY, f"bad {group} state: {exc}")
        log.warning("%s: refused its newest state: %s", group, exc)
        return None
