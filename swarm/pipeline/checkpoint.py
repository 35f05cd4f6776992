"""Checkpoints of a stage server: its stage's state on this node's disk, verified on load.

A stage whose servers all die would otherwise restart from its seed (the trainers' loss jumps
back to where the run began). Every `checkpoint_every` averaging rounds a server writes the
state it would hand a mover (migration.py: flat [params | Adam moments], the Adam step, the
rounds applied), as DiLoCo members do (diloco/member/checkpoint.py): a safetensors file named by its
blake2b digest and a JSON sidecar named by its own hash, the commit point, each written
atomically (swarm/checkpoint_files.py). Loading re-hashes both and recomputes the stage's
state checksum (drift.py) from the tensors; a checkpoint that fails is skipped, the one before
it is tried. One folder per stage, since a server that moved has served several.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ..checkpoint_files import content_hash, is_hash, remove_temporaries, write_atomic
from .drift import flat_checksum
from .errors import StageCheckpointError

log = logging.getLogger(__name__)

FORMAT = "peertrain/stage-checkpoint/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCheckpoint:
    stage: int
    round: int  # averaging rounds the state has applied
    adam_step: int
    flat: torch.Tensor  # [params | exp_avg | exp_avg_sq], as migration.py exports it
    id: str = ""


class StageCheckpoints:
    """A run's stage checkpoints on this node, `keep` per stage (the newest rounds)."""

    def __init__(
        self, directory: str | os.PathLike[str], *, keep: int = 2, manifest_hash: str = ""
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory, self.keep, self.manifest_hash = Path(directory), keep, manifest_hash

    def save(self, checkpoint: StageCheckpoint) -> str:
        """Write `checkpoint` (sync: call in a worker thread); its id."""
        folder = self._folder(checkpoint.stage)
        tensors = save_safetensors({"state": checkpoint.flat.float().contiguous()})
        sidecar = {
            "format": FORMAT,
            "stage": checkpoint.stage,
            "round": checkpoint.round,
            "adam_step": checkpoint.adam_step,
            "manifest_hash": self.manifest_hash,
            "checksum": _checksum(checkpoint.flat, checkpoint.adam_step),
            "tensors_digest": content_hash(tensors),
            "tensors_bytes": len(tensors),
        }
        raw = json.dumps(sidecar, sort_keys=True, separators=(",", ":")).encode()
        checkpoint_id = content_hash(raw)
        write_atomic(folder / f"{sidecar['tensors_digest']}.safetensors", tensors)
        write_atomic(folder / f"{checkpoint_id}.json", raw)  # the commit point
        self._prune(checkpoint.stage)
        return checkpoint_id

    def latest(self, stage: int) -> StageCheckpoint | None:
        """The newest checkpoint of `stage` that verifies (sync); corrupt ones are skipped."""
        for round_, checkpoint_id in reversed(self.rounds(stage)):
            try:
                return self.load(stage, checkpoint_id)
            except StageCheckpointError as exc:
                log.warning("skipping stage %d checkpoint of round %d: %s", stage, round_, exc)
        return None

    def rounds(self, stage: int) -> list[tuple[int, str]]:
        """(round, id) of the committed checkpoints of `stage` of this run, oldest first."""
        found = []
        for path in self._folder(stage).glob("*.json"):
            try:
                sidecar = self._sidecar(stage, path.stem)
            except StageCheckpointError as exc:
                log.warning("ignoring stage checkpoint sidecar %s: %s", path.name, exc)
                continue
            found.append((int(sidecar["round"]), path.stem))
        return sorted(found)

    def load(self, stage: int, checkpoint_id: str) -> StageCheckpoint:
        sidecar = self._sidecar(stage, checkpoint_id)
        digest = str(sidecar["tensors_digest"])
        try:
            raw = (self._folder(stage) / f"{_hex(digest)}.safetensors").read_bytes()
        except OSError as exc:
            raise StageCheckpointError(f"{checkpoint_id[:12]} has lost its tensors") from exc
        if len(raw) != sidecar["tensors_bytes"] or content_hash(raw) != digest:
            raise StageCheckpointError(f"{checkpoint_id[:12]}: tensors do not match their digest")
        try:
            flat = load_safetensors(raw)["state"]
        except Exception as exc:  # safetensors raises its own error types on malformed files
            raise StageCheckpointError(f"{checkpoint_id[:12]}: unreadable: {exc}") from exc
        adam_step = int(sidecar["adam_step"])
        if flat.dim() != 1 or flat.numel() % 3 or _checksum(flat, adam_step) != sidecar["checksum"]:
            raise StageCheckpointError(f"{checkpoint_id[:12]}: state does not match its checksum")
        return StageCheckpoint(
            stage=stage,
            round=int(sidecar["round"]),
            adam_step=adam_step,
            flat=flat,
            id=checkpoint_id,
        )

    def _sidecar(self, stage: int, checkpoint_id: str) -> dict[str, Any]:
        try:
            raw = (self._folder(stage) / f"{_hex(checkpoint_id)}.json").read_bytes()
        except OSError as exc:
            raise StageCheckpointError(f"{checkpoint_id[:12]} is missing") from exc
        if content_hash(raw) != checkpoint_id:
            raise StageCheckpointError(f"{checkpoint_id[:12]}: sidecar does not hash to its name")
        try:
            sidecar = json.loads(raw)
        except ValueError as exc:
            raise StageCheckpointError(f"{checkpoint_id[:12]}: sidecar is not JSON") from exc
        if (
            not isinstance(sidecar, dict)
            or sidecar.get("format") != FORMAT
            or sidecar.get("stage") != stage
            or sidecar.get("manifest_hash") != self.manifest_hash
        ):
            raise StageCheckpointError(f"{checkpoint_id[:12]}: not a checkpoint of this stage")
        return sidecar

    def _folder(self, stage: int) -> Path:
        folder = self.directory / str(int(stage))
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            remove_temporaries(folder)
        return folder

    def _prune(self, stage: int) -> None:
        """Keep the newest `keep` checkpoints of `stage` and the tensor files they name."""
        folder, kept = self._folder(stage), self.rounds(stage)
        for _, checkpoint_id in kept[: -self.keep]:
            (folder / f"{checkpoint_id}.json").unlink(missing_ok=True)
        wanted = {self._sidecar(stage, i)["tensors_digest"] for _, i in kept[-self.keep :]}
        for path in folder.glob("*.safetensors"):
            if path.stem not in wanted:
                path.unlink(missing_ok=True)


def _checksum(flat: torch.Tensor, adam_step: int) -> str:
    return flat_checksum(flat, flat.numel() // 3, adam_step).hex()


def _hex(name: str) -> str:
    if not is_hash(name):
        raise StageCheckpointError(f"{name[:80]!r} is not a checkpoint hash")
    return name
