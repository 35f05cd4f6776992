"""`run.export`: the group's current model out of peertrain, as a plain state_dict on disk.

The copy is θ_global, taken on the driver's torch thread between rounds (the model itself holds
θ_local during inner steps), so an export is the state every member agreed on at some round;
its sidecar names that round and the group's state checksum beside the files' own checksums
(swarm/export.py). The folder is the local user's: the control socket is theirs alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ControlError

if TYPE_CHECKING:
    from .session import RunSession


async def export_run(session: RunSession, out: str, fmt: str) -> dict[str, Any]:
    """Write `session`'s θ_global to folder `out` in format `fmt`; the sidecar written."""
    from peertrain.swarm.export import FORMATS, export_model
    from peertrain.swarm.models.config import ConfigError

    if fmt not in FORMATS:
        raise ControlError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not out or not Path(out).is_absolute():
        raise ControlError(f"--out must be an absolute folder path, not {out!r}")
    driver = session.driver
    if session.manifest.mode != "diloco":
        raise ControlError(_no_whole_model(session.manifest.name, session.manifest.mode))
    if driver is None:
        raise ControlError(f"run {session.manifest.name!r} is still starting; export it later")
    round_, model = await driver.global_model()
    served = driver.sync.served_state
    about = {
        "run": session.manifest.name,
        "run_id": session.run_id,
        "round": round_,
        # the checksum of that round's state as we serve it, once we do: the same on every
        # member holding it, so two members' exports are the same bytes (the status field it
        # was read from before lags the round by a moment, and one member wrote it, one not)
        "state_checksum": served[1].hex()[:16] if served and served[0] == round_ else None,
        "model": driver.spec.model,
        "model_settings": _model_settings(driver.spec),
    }
    try:
        sidecar = await trio.to_thread.run_sync(
            lambda: export_model(model, Path(out), fmt=fmt, about=about)
        )
    except ConfigError as exc:
        raise ControlError(str(exc)) from None
    return {"out": out, **sidecar}


def _model_settings(spec) -> dict[str, Any]:
    """Every setting of a built-in model, defaults included: the spec names only those the
    creator changed, and rebuilding from them needed peertrain's defaults. Other models (a
    plugin, an import path, hf:) keep the settings their spec holds."""
    from peertrain.swarm.models import MODEL_CONFIGS, config_to_dict

    if spec.model in MODEL_CONFIGS:
        return config_to_dict(spec.model_config())
    return dict(spec.model_settings)


def _no_whole_model(name: str, mode: str) -> str:
    """Why a run other than DiLoCo has no model to export, and what to do instead."""
    if mode == "diffusion":
        return (
            f"run {name!r} is a diffusion run: its experts train apart and no node holds the "
            f"whole model to export; draw images with `peertrain sample --run {name} --out "
            "FILE.npz` (the samples as arrays) or FILE.png"
        )
    return (
        f"run {name!r} is a {mode} run: each server holds only its pipeline stage, no node "
        "the whole model to export; export a DiLoCo run (--mode diloco) instead"
    )
