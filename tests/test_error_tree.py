"""One error tree: every error class lives in its layer's errors.py, under that layer's root,
and every root hangs under PeertrainError (issue 13, item 5)."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "dht", "crdt", "swarm", "node")
# Internal signals that never leave their module's layer (each errors.py docstring says why).
OUTSIDE_THE_TREE = {"peertrain.protocol.errors.Invalid"}
ROOTS = {  # protocol/'s root is PeertrainError itself
    "dht": "peertrain.dht.errors.DHTError",
    "crdt": "peertrain.crdt.errors.CRDTError",
    "swarm": "peertrain.swarm.errors.SwarmError",
    "node": "peertrain.node.errors.NodeError",
}


def _sources() -> list[Path]:
    return [path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))]


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def _exception_classes() -> dict[str, list[Path]]:
    """Class name -> the files defining it, for every class that derives (by name, through any
    number of our own classes) from a built-in exception or from libp2p's IOException."""
    known = {
        n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
    }
    known.add("IOException")
    classes = [
        (node, path)
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    found: dict[str, list[Path]] = {}
    grew = True
    while grew:
        grew = False
        for node, path in classes:
            if _base_names(node) & known and path not in found.get(node.name, []):
                found.setdefault(node.name, []).append(path)
                known.add(node.name)
                grew = True
    return found


def test_every_error_class_is_defined_in_an_errors_module():
    stray = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for name, paths in _exception_classes().items()
        for path in paths
        if not path.name.endswith("errors.py")
    )
    assert not stray, "move these into their layer's errors.py:\n" + "\n".join(stray)


def _error_modules() -> list[str]:
    return sorted(
        "peertrain." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in _sources()
        if path.name == "errors.py"
    )


def _layer_root(layer: str) -> type[BaseException]:
    module_name, _, name = ROOTS[layer].rpartition(".")
    root: type[BaseException] = getattr(importlib.import_module(module_name), name)
    return root


@pytest.mark.parametrize("module_name", _error_modules())
def test_every_error_descends_from_peertrain_error_and_its_layer_root(module_name):
    from peertrain.errors import PeertrainError
    from peertrain.protocol.errors import ProtocolError

    module = importlib.import_module(module_name)
    layer = module_name.split(".")[1]
    for name, value in vars(module).items():
        if not (isinstance(value, type) and issubclass(value, BaseException)):
            continue
        qualified = f"{module_name}.{name}"
        if value.__module__ != module_name or qualified in OUTSIDE_THE_TREE:
            continue  # imported to subclass it, or an internal signal
        assert issubclass(value, PeertrainError), qualified
        assert module.__doc__ and name in module.__doc__, f"draw {name} in the docstring's tree"
        if layer in ROOTS:
            # A remote peer's fault may sit under ProtocolError instead (dht's RecordRejected).
            under_root = issubclass(value, _layer_root(layer)) or issubclass(value, ProtocolError)
            assert under_root, f"{qualified} is under neither {ROOTS[layer]} nor ProtocolError"


def test_one_config_error_catches_a_bad_setting_from_any_layer(tmp_path):
    from peertrain.node.config import load_config
    from peertrain.node.errors import NodeError
    from peertrain.swarm.errors import ConfigError
    from peertrain.swarm.models import model_config

    with pytest.raises(ConfigError, match="log_format") as from_node:
        load_config(tmp_path, {"log_format": "xml"})
    assert isinstance(from_node.value, NodeError)  # the CLI reports it as the node's error
    with pytest.raises(ConfigError, match="valid settings"):
        model_config("mlp", {"widht": 3})
