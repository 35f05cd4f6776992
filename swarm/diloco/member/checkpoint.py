"""Checkpoints of a DiLoCo member: safetensors for tensors, a JSON sidecar for the rest.

Layout of a checkpoint directory (everything content-addressed by blake2b-256):

    <tensors digest>.safetensors   params/<name>, outer/momentum, inner/<i>/<key>, local/residual
    <checkpoint id>.json           round, manifest hash, state hash, inner step, AdamW param groups,
                                   and the digest + size of the tensor file; its id is its own hash

The sidecar is written last and is the commit point: a checkpoint exists once its sidecar does. Each
file is written to a temporary name, fsynced, renamed, and the directory fsynced, so a crash leaves
either the old set of checkpoints or the new one, plus ignorable temporary files. Loading re-hashes
both files and recomputes the state hash from the loaded tensors. Nothing is ever pickled.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peertrain.swarm.checkpoint_files import content_hash, is_hash, remove_temporaries, write_atomic
from peertrain.swarm.diloco.errors import CheckpointCorrupt, CheckpointError
from peertrain.swarm.diloco.member.member import MemberState
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

log = logging.getLogger(__name__)

# a full disk or quota: the member trains on without this checkpoint (the driver says so)
OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

FORMAT = "peertrain/diloco-checkpoint/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointInfo:
    id: str  # hash of the sidecar bytes; the sidecar commits to the tensor file's digest
    round: int
    state_hash: str
    manifest_hash: str
    tensors_digest: str
    tensors_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedCheckpoint:
    info: CheckpointInfo
    sidecar: bytes
    tensors: bytes


def encode_checkpoint(state: MemberState, *, manifest_hash: str = "") -> EncodedCheckpoint:
    """Serialise `state` to (sidecar, tensors) bytes and name them."""
    tensors: dict[str, torch.Tensor] = {
        f"params/{k}": v.contiguous() for k, v in state.params.items()
    }
    tensors["outer/momentum"] = state.momentum.contiguous()
    if state.residual is not None:
        tensors["local/residual"] = state.residual.contiguous()
    param_groups = None
    if state.inner_optimizer is not None:
        for index, slots in state.inner_optimizer["state"].items():
            for key, value in slots.items():
                if not isinstance(value, torch.Tensor):
                    raise CheckpointError(f"inner optimizer state {index}/{key} is not a tensor")
                tensors[f"inner/{index}/{key}"] = value.contiguous()
        param_groups = [_jsonable(group) for group in state.inner_optimizer["param_groups"]]
    tensor_bytes = save_safetensors(tensors)
    sidecar = {
        "format": FORMAT,
        "round": state.round,
        "manifest_hash": manifest_hash,
        "state_hash": state.state_hash(),
        "inner_step": state.inner_step,
        "inner_param_groups": param_groups,
        "extra": _jsonable(dict(state.extra)),
        "tensors_digest": content_hash(tensor_bytes),
        "tensors_bytes": len(tensor_bytes),
    }
    sidecar_bytes = json.dumps(sidecar, sort_keys=True, separators=(",", ":")).encode()
    return EncodedCheckpoint(
        info=_info(content_hash(sidecar_bytes), sidecar),
        sidecar=sidecar_bytes,
        tensors=tensor_bytes,
    )


def decode_checkpoint(checkpoint_id: str, sidecar_bytes: bytes, tensor_bytes: bytes) -> MemberState:
    """Verify both files against `checkpoint_id`, rebuild the state; `CheckpointCorrupt` if not."""
    sidecar = _parse_sidecar(checkpoint_id, sidecar_bytes)
    if (
        len(tensor_bytes) != sidecar["tensors_bytes"]
        or content_hash(tensor_bytes) != sidecar["tensors_digest"]
    ):
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id[:12]}: tensor file does not match its digest"
        )
    try:
        tensors = load_safetensors(tensor_bytes)
    except Exception as exc:  # safetensors raises its own error types on malformed headers
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id[:12]}: unreadable tensors: {exc}"
        ) from exc
    state = _state_from(sidecar, tensors)
    if state.state_hash() != sidecar["state_hash"]:
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id[:12]}: state hash does not match its tensors"
        )
    return state


class CheckpointStore:
    """A directory of checkpoints keeping the newest `keep` rounds."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int = 3,
        room: Callable[[int], None] | None = None,
    ) -> None:
        """`room(nbytes)` raises when `nbytes` more may not be written (the node's disk budget):
        the checkpoint is then refused with CheckpointError before anything is written."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.room = room
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        remove_temporaries(self.directory)

    def save(self, state: MemberState, *, manifest_hash: str = "") -> CheckpointInfo:
        encoded = encode_checkpoint(state, manifest_hash=manifest_hash)
        self.add(encoded.info.id, encoded.sidecar, encoded.tensors)
        return encoded.info

    def add(self, checkpoint_id: str, sidecar: bytes, tensors: bytes) -> MemberState:
        """Store a checkpoint received as bytes (e.g. from a peer) once it verifies; then prune."""
        state = decode_checkpoint(checkpoint_id, sidecar, tensors)
        digest = content_hash(tensors)
        fresh = not self._tensor_path(digest).exists()
        self._make_room(len(sidecar) + (len(tensors) if fresh else 0))
        try:
            if fresh:
                write_atomic(self._tensor_path(digest), tensors)
            write_atomic(self._sidecar_path(checkpoint_id), sidecar)  # the commit point
        except OSError as exc:
            # write_atomic leaves no temporary behind and older checkpoints are untouched; a
            # tensor file written without its sidecar is unreferenced and pruned below
            self.prune()
            if exc.errno not in OUT_OF_SPACE:  # a broken home (no such folder…) is the run's end
                raise
            raise CheckpointError(f"checkpoint of round {state.round} not written: {exc}") from exc
        self.prune()
        return state

    def _make_room(self, nbytes: int) -> None:
        if self.room is None:
            return
        try:
            self.room(nbytes)
        except Exception as exc:  # noqa: BLE001 - the owner's budget, in its own error type
            raise CheckpointError(f"no room for a {nbytes}-byte checkpoint: {exc}") from exc

    def list(self) -> list[CheckpointInfo]:
        """Committed checkpoints whose sidecar verifies, oldest round first."""
        infos = []
        for path in self.directory.glob("*.json"):
            try:
                infos.append(_info(path.stem, _parse_sidecar(path.stem, path.read_bytes())))
            except (CheckpointError, OSError) as exc:
                log.warning("ignoring checkpoint sidecar %s: %s", path.name, exc)
        return sorted(infos, key=lambda info: (info.round, info.id))

    def read(self, checkpoint_id: str) -> tuple[bytes, bytes]:
        """The (sidecar, tensors) bytes, as served to peers; the sidecar is verified, the tensors
        are verified by `decode_checkpoint` (here in `load`, or by the peer that receives them)."""
        try:
            sidecar = self._sidecar_path(checkpoint_id).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"checkpoint {checkpoint_id[:12]} is missing: {exc}") from exc
        digest = _parse_sidecar(checkpoint_id, sidecar)["tensors_digest"]
        try:
            return sidecar, self._tensor_path(digest).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"checkpoint {checkpoint_id[:12]} has lost its tensors") from exc

    def load(self, checkpoint_id: str) -> MemberState:
        return decode_checkpoint(checkpoint_id, *self.read(checkpoint_id))

    def latest(self) -> tuple[CheckpointInfo, MemberState] | None:
        """The newest checkpoint that verifies; corrupt ones are skipped (and logged)."""
        for info in reversed(self.list()):
            try:
                return info, self.load(info.id)
            except CheckpointError as exc:
                log.warning("skipping checkpoint %s of round %d: %s", info.id[:12], info.round, exc)
        return None

    def prune(self) -> None:
        """Keep the newest `keep` checkpoints and the tensor files they refer to."""
        infos = self.list()
        for info in infos[: -self.keep]:
            self._sidecar_path(info.id).unlink(missing_ok=True)
        wanted = {info.tensors_digest for info in infos[-self.keep :]}
        for path in self.directory.glob("*.safetensors"):
            if path.stem not in wanted:
                path.unlink(missing_ok=True)

    def _sidecar_path(self, checkpoint_id: str) -> Path:
        return self.directory / f"{_checked_hex(checkpoint_id)}.json"

    def _tensor_path(self, digest: str) -> Path:
        return self.directory / f"{_checked_hex(digest)}.safetensors"


def _checked_hex(name: str) -> str:
    if not is_hash(name):
        raise CheckpointError(f"{name!r} is not a checkpoint hash")
    return name


def _parse_sidecar(checkpoint_id: str, data: bytes) -> dict[str, Any]:
    if content_hash(data) != checkpoint_id:
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id[:12]}: sidecar does not hash to its name"
        )
    try:
        sidecar = json.loads(data)
    except ValueError as exc:
        raise CheckpointCorrupt(f"checkpoint {checkpoint_id[:12]}: sidecar is not JSON") from exc
    if not isinstance(sidecar, dict) or sidecar.get("format") != FORMAT:
        raise CheckpointError(
            f"checkpoint {checkpoint_id[:12]}: unknown format {sidecar.get('format')!r}"
        )
    return sidecar


def _info(checkpoint_id: str, sidecar: Mapping[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(
        id=checkpoint_id,
        round=int(sidecar["round"]),
        state_hash=str(sidecar["state_hash"]),
        manifest_hash=str(sidecar["manifest_hash"]),
        tensors_digest=str(sidecar["tensors_digest"]),
        tensors_bytes=int(sidecar["tensors_bytes"]),
    )


def _state_from(sidecar: Mapping[str, Any], tensors: dict[str, torch.Tensor]) -> MemberState:
    params = {k.removeprefix("params/"): v for k, v in tensors.items() if k.startswith("params/")}
    inner_optimizer = None
    if sidecar["inner_param_groups"] is not None:
        slots: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("inner/"):
                _, index, name = key.split("/", 2)
                slots.setdefault(int(index), {})[name] = value
        groups = [
            {**g, "betas": tuple(g["betas"])} if "betas" in g else g
            for g in sidecar["inner_param_groups"]
        ]
        inner_optimizer = {"state": dict(sorted(slots.items())), "param_groups": groups}
    try:
        momentum = tensors["outer/momentum"]
    except KeyError as exc:
        raise CheckpointCorrupt("checkpoint has no outer momentum buffer") from exc
    return MemberState(
        round=int(sidecar["round"]),
        params=params,
        momentum=momentum,
        inner_step=int(sidecar["inner_step"]),
        inner_optimizer=inner_optimizer,
        residual=tensors.get("local/residual"),
        extra=sidecar.get("extra") or {},
    )


def _jsonable(value: Any) -> Any:
    """Tuples → lists, and a clear error for anything JSON cannot hold exactly."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise CheckpointError(f"cannot store {type(value).__name__} in a checkpoint sidecar")
