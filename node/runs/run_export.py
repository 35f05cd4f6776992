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
        raise ControlError(f"run {session.manifest.name!r} is a {session.manifest.mode} run: "
                           "only DiLoCo runs export a whole model yet")  # fmt: skip
    if driver is None:
        raise ControlError(f"run {session.manifest.name!r} is still starting; export it later")
    round_, model = await driver.global_model()
    progress = driver.progress
    about = {
        "run": session.manifest.name,
        "run_id": session.run_id,
        "round": round_,
        # the group's checksum of that round, when status has already published it
        "state_checksum": progress.state_checksum if progress.round == round_ else None,
        "model": driver.spec.model,
        "model_settings": dict(driver.spec.model_settings),
    }
    try:
        sidecar = await trio.to_thread.run_sync(
            lambda: export_model(model, Path(out), fmt=fmt, about=about)
        )
    except ConfigError as exc:
        raise ControlError(str(exc)) from None
    return {"out": out, **sidecar}
