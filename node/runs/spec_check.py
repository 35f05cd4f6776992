"""What this node accepts of a run's spec before it builds anything: the joiner's own limits.

A manifest may come from anyone, so its spec never decides what the joiner reads or spends:
a spec naming local files is refused when decoded (swarm/data: user data is named by digest),
the user's own file (`--data PATH`) must have the digest the spec names, and the model and
dataset sizes must fit the joiner's `--max-params` and `--max-memory` (swarm/budget.py). All of
it runs on the spec's configs alone, before the session builds a model or loads a dataset.

The data path is this node's business, not the run's: it is kept beside the saved manifest
(`<home>/runs/<run id>/local-data`), so a restarted daemon trains on the same file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from peertrain.crdt.manifest import RunManifest
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.budget import RunBudget, SpecOverBudget, check_budget
from peertrain.swarm.checkpoint_files import write_atomic
from peertrain.swarm.errors import ConfigError

from ..errors import ControlError

LOCAL_DATA_FILE = "local-data"


def decode_spec(manifest: RunManifest) -> Any:
    """The manifest's spec as its mode's RunSpec; ControlError when it is not one."""
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.pipeline.run_spec import PipelineSpec

    kinds = {"diloco": DiLoCoSpec, "swarm": PipelineSpec, "diffusion": DiffusionSpec}
    if manifest.mode not in kinds:
        raise ControlError(f"run mode {manifest.mode!r} is not served by this node")
    try:
        return kinds[manifest.mode].from_bytes(manifest.spec)
    except DecodeError as exc:
        raise ControlError(f"refusing run {manifest.name!r}: {exc}") from None


def check_spec(
    manifest: RunManifest, *, budget: RunBudget, data: str | None, own_model: bool = False
) -> None:
    """Refuse (ControlError) a run whose spec this node must not or cannot build. `own_model`:
    this process holds a user's model (peertrain.DiLoCo), the only way into `external:` runs."""
    spec = decode_spec(manifest)
    if _is_external(spec) and not own_model:
        raise ControlError(
            f"refusing run {manifest.name!r}: it trains a user-supplied model ({spec.model}) "
            "that only a script holding that model can join, with "
            "peertrain.DiLoCo(model, optimizer, run=...)"
        )
    try:
        check_budget(spec, budget)
        _check_data(spec, data)
    except (SpecOverBudget, ConfigError) as exc:
        raise ControlError(f"refusing run {manifest.name!r}: {exc}") from None


def _is_external(spec: Any) -> bool:
    from peertrain.swarm.models.external import is_external

    return is_external(spec.model)


def _check_data(spec: Any, data: str | None) -> None:
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec

    if isinstance(spec, DiffusionSpec):  # its images come by dataset name, never from a file
        if data is not None:
            raise ConfigError("a diffusion run trains on a named dataset: leave out --data")
        return
    config = spec.dataset_config()
    if data is None and not getattr(config, "data_digest", ""):
        return
    if not hasattr(config, "check_data"):
        raise ConfigError(f"a {spec.dataset} dataset trains on no user data: leave out --data")
    config.check_data(data)


def with_data_digest(spec: dict[str, Any], data: str) -> dict[str, Any]:
    """The creator's spec settings naming `data` by its digest; without named `sources`, the
    run trains on that file alone (the stdlib corpus would otherwise fill `max_bytes` first)."""
    from peertrain.swarm.data import data_digest

    dataset = spec.get("dataset") or "text"
    settings = dict(spec.get("dataset_settings") or {})
    try:
        settings["data_digest"] = data_digest(dataset, data)
    except ConfigError as exc:
        raise ControlError(str(exc)) from None
    if dataset == "text":
        settings.setdefault("sources", [])
    return {**spec, "dataset": dataset, "dataset_settings": settings}


def with_hf_model(spec: dict[str, Any]) -> dict[str, Any]:
    """The creator's spec with `--model hf:PATH_OR_CONFIG` read into plain settings (no path
    travels to peers; swarm/models/hf.py)."""
    model = spec.get("model")
    if not isinstance(model, str) or not model.startswith("hf:"):
        return spec
    from peertrain.swarm.models.hf import resolve_hf

    try:
        name, settings = resolve_hf(model, spec.get("model_settings") or {})
    except ConfigError as exc:
        raise ControlError(str(exc)) from None
    return {**spec, "model": name, "model_settings": settings}


def offer_hf_folders(paths: Iterable[str]) -> None:
    """The `--model hf:DIR` folders among `paths` hold weights this node may start from."""
    folders = [Path(p.removeprefix("hf:")).expanduser() for p in paths if p.startswith("hf:")]
    if not folders:  # hf.py imports torch: seconds on the event loop of every run create/join
        return
    from peertrain.swarm.models.hf import WEIGHTS, offer_pretrained

    for folder in folders:
        if (folder / WEIGHTS).is_file():
            offer_pretrained(folder)


def trust_models(paths: Iterable[str]) -> None:
    """Let this process import the model factories among `paths` (the local user's choice:
    `trusted_models`, `--model package.module:factory`) when a run names them, and start from
    the weights of the `--model hf:DIR` folders among them."""
    offer_hf_folders(paths)
    import_paths = [p for p in paths if ":" in p and not p.startswith(("external:", "hf:"))]
    if not import_paths:
        return
    from peertrain.swarm.models.registry import is_import_path, trust_import

    for path in import_paths:
        if is_import_path(path):
            trust_import(path)


def remember_data(directory: Path, data: str | None) -> None:
    """Keep this node's data path for the run (or forget it, `data` None)."""
    path = directory / LOCAL_DATA_FILE
    if data is None:
        path.unlink(missing_ok=True)
        return
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    # atomic: written in place, a kill left an empty file and a restart trained without its data
    write_atomic(path, (str(Path(data).expanduser().absolute()) + "\n").encode())


def local_data(directory: Path) -> str | None:
    path = directory / LOCAL_DATA_FILE
    return path.read_text().strip() or None if path.exists() else None
