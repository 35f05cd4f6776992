"""Adopting a trusted state by download: fetch it, check it, and blame whoever lied.

The checksum was attested by trusted signers (trust.py), so any provider of it is as good as
another: the transport checks every chunk against it. What the checksum cannot tell is whether
the attested state is sane; `StateCheck` can. A state that fails (bytes that decode to no state,
NaN, the wrong size, a round beyond the newest attestation, too far from ours) costs its
providers and its attesters a penalty through `on_penalty`. A fetch that fails is only logged:
a network's failure is no evidence, and the driver tries again later. Nothing here raises.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import torch
from peertrain.crdt.runstate import RunState
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.tensors import PreparedTensor, TensorDownload
from peertrain.swarm.diloco.group.trust import StateCheck, TrustedStates
from peertrain.swarm.diloco.member.member import DiLoCoMember
from peertrain.swarm.progress import MB, Download

log = logging.getLogger(__name__)


class TensorTransport(Protocol):
    """Content-addressed tensors, as the node serves and fetches them."""

    def put(self, prepared: PreparedTensor, *, pin: bool) -> None: ...

    def unpin(self, checksum: bytes) -> None: ...

    def discard(self, checksum: bytes) -> None: ...

    async def fetch(
        self,
        holders: list[str],
        checksum: bytes,
        max_nbytes: int,
        *,
        on_header: Callable[[TensorDownload], None] | None = None,
    ) -> TensorDownload: ...


class StateDownloads:
    """Trusted states fetched for one member."""

    def __init__(
        self,
        *,
        me: str,
        state: RunState,
        tensors: TensorTransport,
        trust: TrustedStates,
        thread: Callable[..., Awaitable],
        on_penalty: Callable[[str, str], None] | None,
    ) -> None:
        self.me, self.state, self.tensors, self.trust = me, state, tensors, trust
        self.thread = thread
        self.on_penalty = on_penalty  # (peer, reason)
        self.refused = 0  # downloads that failed or did not pass the checks
        self.current: Download | None = None  # the one in flight, for status and progress logs
        self.asked: list[str] = []  # every peer a download asked, oldest first (the last 16)

    async def fetch_checked(
        self, member: DiLoCoMember, round_: int, checksum: bytes, *, running: bool
    ) -> torch.Tensor | None:
        """The state `checksum` of `round_` (params ‖ momentum), checked; None if it could not
        be had or was refused. `running`: we train already, so its distance from ours counts."""
        providers = sorted(
            p for p in self.state.checkpoints().get(round_, {}).get(checksum, ()) if p != self.me
        )
        numel = member.layout.numel
        what = f"state of round {round_}"
        behind = member.round if member.round < round_ else None
        if behind is not None:  # a joiner, or a member the group left behind
            what += f" (catching up from round {behind})"
        self.current = progress = Download(what, donors=len(providers))
        self.asked = [*(p for p in self.asked if p not in providers), *providers][-16:]
        # trusted when we chose it: an anchor whose lease lapses while a slow download runs
        # makes nobody's state "beyond the newest trusted one", least of all its providers'
        trusted_before = self.trust.newest_round()
        try:
            download = await self.tensors.fetch(
                providers,
                checksum,
                max_nbytes=8 * numel + 1024,
                on_header=lambda transfer: setattr(progress, "transfer", transfer),
            )
        except Exception as exc:  # noqa: BLE001 - TransferFailed or any transfer error: a peer's doing, never the end of the driver
            self.refused += 1
            log.warning(
                "state of round %d not fetched from %d provider(s): %r", round_, len(providers), exc
            )
            self.trust.failed(round_, checksum, f"not fetched: {exc!r}")
            return None
        finally:
            self.current = None
        _log_done({**progress.status(), "round": round_, "from_round": behind})
        newest = max(trusted_before, self.trust.newest_round())
        check = StateCheck(numel=numel, newest_trusted_round=newest)
        own = (member.global_params, member.round) if running else None
        checked = await self.thread(_checked, download, round_, check, own)
        if isinstance(checked, str):
            self.refused += 1
            log.warning("refused the state of round %d: %s", round_, checked)
            attesters = self.trust.attested(round_).get(checksum, frozenset())
            for peer in sorted(set(providers) | attesters):
                self._penalise(peer, f"attested or served a bad state: {checked}")
            self.trust.failed(round_, checksum, f"refused: {checked}")
            return None
        self.trust.fetched(round_, checksum)
        return checked

    def _penalise(self, peer: str, reason: str) -> None:
        if peer != self.me and self.on_penalty is not None:
            self.on_penalty(peer, reason)


def _log_done(download: dict) -> None:
    """One line per finished download: size, time, rate, donors (the same as fields in JSON)."""
    log.info(
        "fetched the %s: %.1f MB in %.1f s (%.1f MB/s) from %d donor(s)",
        download["what"],
        download["bytes_done"] / MB,
        download["elapsed_s"],
        download["bytes_per_s"] / MB,
        download["donors"],
        extra={"event": "download_done", "fields": download},
    )


def _checked(
    download: TensorDownload,
    round_: int,
    check: StateCheck,
    own: tuple[torch.Tensor, int] | None,
) -> torch.Tensor | str:
    """The downloaded state, or why it must not be used (thread side)."""
    try:
        flat = download.finish()
    except ProtocolError as exc:  # bytes that match the checksum but decode to no state
        return str(exc)
    params, own_round = own if own is not None else (None, 0)
    problem = check.problem(flat, round_, params, own_round)
    return flat if problem is None else problem
