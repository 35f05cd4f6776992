"""Expert groups in the run's RunState: who trains what, which group needs a joiner, what to sample.

Every member of a diffusion run announces its group as its role in the run's RunState (with its
group's latest eval loss) and mirrors its group's newest state there as a checkpoint reference.
That is all the run-wide state says; each group's rounds live in the group's own namespace.
A joiner takes the group with the fewest members per image of its data (the router's share is an
average cluster's), ties to the bigger group, then the earlier one; a sampler takes, per group,
the newest round's state that most of its live members announce (then the larger checksum, so
every sampler picks the same). A member of a group that no trusted signer (the run's creator or
an anchor) trains starts from that same state (`seed_state`): DiLoCo adopts states only on a
trusted signer's word, and without one a joiner would start from the initial weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from peertrain.crdt.runstate import RunState

from .run_spec import ROUTER, DiffusionSpec


def group_members(state: RunState, spec: DiffusionSpec) -> dict[str, set[str]]:
    """Live members of each group, from their announced roles."""
    out: dict[str, set[str]] = {g: set() for g in spec.groups()}
    for peer, member in state.members().items():
        if member.info.role in out:
            out[member.info.role].add(peer)
    return out


def group_weights(spec: DiffusionSpec, sizes: list[int]) -> dict[str, float]:
    """How much data each group trains on: its cluster's size; the router an average cluster's."""
    weights = {g: float(max(n, 1)) for g, n in zip(spec.groups(), sizes, strict=False)}
    weights[ROUTER] = max(sum(sizes) / len(sizes), 1.0)
    return weights


def choose_group(state: RunState, spec: DiffusionSpec, sizes: list[int], me: str) -> str:
    """The group with the most need: fewest live members (not counting us) per unit of data."""
    members = group_members(state, spec)
    weights = group_weights(spec, sizes)
    order = spec.groups()

    def need(group: str) -> tuple[float, float, int]:
        return (len(members[group] - {me}) / weights[group], -weights[group], order.index(group))

    return min(order, key=need)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupState:
    """A group's newest state as the run's RunState announces it."""

    group: str
    round: int
    checksum: bytes
    providers: frozenset[str]


def newest_states(
    state: RunState, spec: DiffusionSpec, *, besides: str | None = None
) -> dict[str, GroupState]:
    """Per group (that has announced one), the state a sampler fetches; `besides`: a peer
    whose own announcements do not count (a member asking what its group holds without it)."""
    members = group_members(state, spec)
    if besides is not None:
        members = {g: peers - {besides} for g, peers in members.items()}
    out = {}
    checkpoints = state.checkpoints()
    for group, peers in members.items():
        best: tuple[int, int, bytes] | None = None
        for round_, entries in checkpoints.items():
            for checksum, providers in entries.items():
                holders = providers & peers
                key = (round_, len(holders), checksum)
                if holders and (best is None or key > best):
                    best = key
        if best is not None:
            round_, _, checksum = best
            providers = checkpoints[round_][checksum] & peers
            out[group] = GroupState(
                group=group, round=round_, checksum=checksum, providers=providers
            )
    return out


def seed_state(
    state: RunState, spec: DiffusionSpec, group: str, me: str, *, creator: str
) -> GroupState | None:
    """The state `me` should start `group` from when no trusted signer of the run trains in the
    group (so DiLoCo's own catch-up has nobody to follow): the newest one the group's other
    live members announce. None when a trusted signer is in the group, or nothing is announced."""
    trusted = {creator, *spec.anchors}
    if group_members(state, spec)[group] & trusted - {me}:
        return None
    return newest_states(state, spec, besides=me).get(group)


def group_progress(state: RunState, spec: DiffusionSpec) -> dict[str, dict]:
    """Per group: live members, inner steps done by them, newest round, their latest loss."""
    members = group_members(state, spec)
    newest = newest_states(state, spec)
    live = state.members()
    out = {}
    for group, peers in members.items():
        losses = [live[p].info.loss for p in peers if live[p].info.loss is not None]
        out[group] = {
            "members": sorted(peers),
            "steps": sum(state.progress(p) for p in peers),
            "round": newest[group].round if group in newest else None,
            "loss": min(losses) if losses else None,
        }
    return out
