"""`peertrain run options` (and `--set help`): every run setting, read from the spec classes.

Each mode's spec (DiLoCo, SWARM pipeline, diffusion) and each built-in model's and dataset's
config is a frozen dataclass; a setting's type and default come from its field, its meaning from
the comment on the field's line (or the comment lines just above it). So the listing cannot
drift from what a spec accepts: a field added without a comment fails
tests/node/test_run_options.py. Run settings are taken as flags (`--rounds`) or as `--set
KEY=VALUE` (JSON values; `model_settings.n_layer=4` reaches inside the model's settings).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import json
import textwrap
import tokenize
from typing import Any, NamedTuple


class Setting(NamedTuple):
    key: str  # as `--set` takes it: `lr`, `model_settings.n_layer`
    type: str
    default: Any
    meaning: str


def groups() -> dict[str, tuple[str, type]]:
    """Group name → (its heading, the dataclass whose fields it lists), in listing order."""
    from peertrain.swarm.data import DATASET_CONFIGS
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.models import MODEL_CONFIGS
    from peertrain.swarm.pipeline.run_spec import PipelineSpec

    out: dict[str, tuple[str, type]] = {
        "diloco": ("DiLoCo runs (--mode diloco, the default)", DiLoCoSpec),
        "pipeline": ("SWARM pipeline runs (--mode swarm)", PipelineSpec),
        "diffusion": ("diffusion runs (--mode diffusion)", DiffusionSpec),
    }
    for name, cls in MODEL_CONFIGS.items():
        out[f"model {name}"] = (f"--model {name}: model_settings.KEY", cls)
    for name, cls in DATASET_CONFIGS.items():
        if name != "external":  # a user's own loop feeds the model: nothing to set
            out[f"dataset {name}"] = (f"--dataset {name}: dataset_settings.KEY", cls)
    return out


def settings_of(cls: type, under: str = "") -> list[Setting]:
    """Every init field of the dataclass `cls` as a Setting (`under`: the key it sits under)."""
    meanings = field_meanings(cls)
    prefix = f"{under}." if under else ""
    out = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        out.append(
            Setting(
                prefix + field.name, str(field.type), _default(field), meanings.get(field.name, "")
            )
        )
    return sorted(out)


def all_settings() -> dict[str, tuple[str, list[Setting]]]:
    """Group → (heading, its settings), the nested ones under their spec key."""
    out = {}
    for group, (heading, cls) in groups().items():
        under = group.split()[0] + "_settings" if " " in group else ""
        out[group] = (heading, settings_of(cls, under))
    return out


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    return list(value) if isinstance(value, tuple) else value


def field_meanings(cls: type) -> dict[str, str]:
    """Field name → the comment on its line, else the comment lines right above it, for `cls`
    and the dataclasses it inherits from (the subclass's comment wins)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            out.update(_class_comments(klass))
    return out


@functools.cache
def _class_comments(cls: type) -> dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    out = {}
    lines = source.splitlines()
    for number, line in enumerate(lines, start=1):
        name = _field_name(line)
        if name is None:
            continue
        if number in comments:
            out[name] = comments[number]
            continue
        above = []
        row = number - 1
        while row in comments and row not in code_lines:
            above.insert(0, comments[row])
            row -= 1
        if above:
            out[name] = " ".join(above)
    return out


def _field_name(line: str) -> str | None:
    """`    lr: float = 4e-4  # …` → 'lr' (a field of the class body, one indent deep)."""
    if not line.startswith("    ") or line.startswith("     "):
        return None
    head = line.strip().split(":", 1)[0]
    if not head.isidentifier() or ":" not in line or head.isupper():
        return None
    return head


def render(mode: str | None = None) -> str:
    """The listing as text: a heading per group, one line per setting, meanings wrapped."""
    chunks = [
        "Run settings: the flags of `run create` set the common ones (--rounds, --lr, …); any\n"
        "of these is `--set KEY=VALUE` (VALUE as JSON, e.g. --set model_settings.n_layer=4)."
    ]
    for group, (heading, settings) in all_settings().items():
        if mode and not _shown(group, mode):
            continue
        chunks.append(f"\n{heading}")
        for s in settings:
            head = f"  {s.key}  ({s.type}, default {json.dumps(s.default)})"
            body = textwrap.fill(
                s.meaning, width=96, initial_indent="      ", subsequent_indent="      "
            )
            chunks.append(head + ("\n" + body if s.meaning else ""))
    return "\n".join(chunks)


def _shown(group: str, mode: str) -> bool:
    """`--mode` narrows the listing to that mode's spec, models and datasets."""
    spec_group = {"swarm": "pipeline"}.get(mode, mode)
    if group in ("diloco", "pipeline", "diffusion"):
        return group == spec_group
    return spec_group != "diffusion"  # diffusion runs take no model_settings (and only a limit)


def as_json(mode: str | None = None) -> dict[str, list[dict[str, Any]]]:
    return {
        group: [s._asdict() for s in settings]
        for group, (_, settings) in all_settings().items()
        if not mode or _shown(group, mode)
    }


def cmd_run_options(args: Any) -> int:
    """`peertrain run options [--mode M] [--json]`."""
    mode = getattr(args, "mode", None)
    print(json.dumps(as_json(mode), indent=2) if args.json else render(mode))
    return 0
