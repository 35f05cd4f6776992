"""A new run's spec as its manifest carries it, from the settings its creator gave.

`run.create` hands this node's user's settings (a dict, as `--set` and the CLI's run options
build it) to the mode's spec class, which checks every field; a setting it refuses is the user's
error, said in one line. A diffusion run's partition is fitted here too (on a worker thread:
it imports torch), so its spec names the artifact every member will load.
"""

from __future__ import annotations

from typing import Any

from ..errors import ControlError


def diffusion_spec(spec: dict[str, Any]) -> tuple[bytes, bytes]:
    """A diffusion run's spec bytes with its partition fitted and named, and the artifact."""
    from peertrain.swarm.diffusion.run_partition import with_partition
    from peertrain.swarm.errors import SwarmError

    try:
        built, artifact = with_partition(spec)
    except (SwarmError, TypeError, ValueError) as exc:
        raise ControlError(f"invalid run settings: {exc}") from None
    return built.to_bytes(), artifact


def spec_bytes_of(mode: str, spec: dict[str, Any]) -> bytes:
    """A DiLoCo or SWARM pipeline run's spec bytes, its settings checked by its spec class."""
    if mode not in ("diloco", "swarm"):
        raise ControlError(
            f"unknown mode {mode!r}; this version trains `diloco`, `swarm` and `diffusion` runs"
        )
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.models.config import ConfigError
    from peertrain.swarm.pipeline.run_spec import PipelineSpec

    try:
        if mode == "swarm":
            return PipelineSpec.from_settings(_open_pipeline(spec)).to_bytes()
        return DiLoCoSpec.checked(spec).to_bytes()
    except (ConfigError, TypeError, ValueError) as exc:
        raise ControlError(f"invalid run settings: {exc}") from None


def _open_pipeline(spec: dict[str, Any]) -> dict[str, Any]:
    """A SWARM pipeline run is open: any peer with a live member record may call its stages
    (docs/security.md). An invite pipeline run is refused by name here, never created
    as an open one that a user believes closed; `admission: open` is what it is anyway."""
    admission = spec.get("admission", "open")
    if admission != "open":
        raise ControlError(
            f"SWARM pipeline runs have no {admission!r} admission: any peer with a member "
            "record may call their stages; an invite run trains with --mode diloco"
        )
    return {k: v for k, v in spec.items() if k != "admission"}
