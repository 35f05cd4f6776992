"""Dependencies point one way (docs/design.md §1): each layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ALLOWED = {
    "protocol": set(),
    "dht": {"protocol"},
    "crdt": {"protocol"},
    "swarm": {"protocol", "dht", "crdt"},
    "node": {"protocol", "dht", "crdt", "swarm"},
}


def _imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    layers: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "peertrain" and len(parts) > 1 and parts[1] in ALLOWED:
                layers.add(parts[1])
    return layers


def test_every_layer_imports_only_layers_below_it():
    violations = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((ROOT / layer).rglob("*.py")):
            wrong = _imported_layers(path) - allowed - {layer}
            if wrong:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(wrong)}")
    assert not violations, "\n".join(violations)


def test_relative_imports_do_not_climb_out_of_a_layer():
    offenders = []
    for layer in ALLOWED:
        for path in sorted((ROOT / layer).rglob("*.py")):
            depth = len(path.relative_to(ROOT / layer).parts)  # 1 = directly in the layer
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level >= depth + 1:
                    offenders.append(
                        f"{path.relative_to(ROOT)}: from {'.' * node.level}{node.module}"
                    )
    assert not offenders, "\n".join(offenders)


# Inside node/ the same rule holds, one way down this list (docs/layout.md). Modules directly in
# node/ are the daemon's level (daemon, config, log setup), except errors.py, which every
# sub-layer may raise. TYPE_CHECKING imports count: a type hint that reaches up is still a knot.
NODE_ORDER = ["net", "nat", "services", "runs", "<daemon>", "api", "cli"]
NODE_SHARED = {"errors", "supervision", "params"}


def _node_level(module: str) -> str | None:
    """'peertrain.node.services.dht' -> 'services'; 'peertrain.node.daemon' -> '<daemon>'."""
    parts = module.split(".")
    if parts[:2] != ["peertrain", "node"] or len(parts) < 3:
        return None
    if parts[2] in NODE_SHARED:
        return None
    return parts[2] if parts[2] in NODE_ORDER else "<daemon>"


def _absolute_imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every `peertrain.…` module the file imports, relative imports resolved."""
    package = ["peertrain", *path.relative_to(root).with_suffix("").parts[:-1]]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
            # `from .x import y` may import a module y: count the deepest name too
            found.append((node.lineno, base.rstrip(".")))
            found += [(node.lineno, f"{base.rstrip('.')}.{a.name}") for a in node.names]
    return found


def node_upward_imports(root: Path = ROOT) -> list[str]:
    violations: dict[tuple[str, int], str] = {}
    for path in sorted((root / "node").rglob("*.py")):
        mine = _node_level(".".join(["peertrain", *path.relative_to(root).with_suffix("").parts]))
        if mine is None:
            continue
        for lineno, module in _absolute_imports(path, root):
            theirs = _node_level(module)
            if theirs is not None and NODE_ORDER.index(theirs) > NODE_ORDER.index(mine):
                where = (f"{path.relative_to(root)}:{lineno} ({mine})", lineno)
                violations[where] = min(violations.get(where, module), module, key=len)
    return sorted(f"{where} imports {module}" for (where, _), module in violations.items())


def test_node_sub_layers_import_only_downwards():
    violations = node_upward_imports()
    assert not violations, "\n".join(violations)


def test_an_upward_import_inside_node_is_caught(tmp_path):
    (tmp_path / "node" / "net").mkdir(parents=True)
    (tmp_path / "node" / "net" / "host.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..daemon import Daemon\n"
    )
    (tmp_path / "node" / "net" / "rpc.py").write_text("from ..errors import NodeError\n")
    expected = "node/net/host.py:3 (net) imports peertrain.node.daemon"
    assert node_upward_imports(tmp_path) == [expected]


def test_no_product_layer_imports_the_testing_package():
    offenders = []
    for layer in ALLOWED:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for lineno, module in _absolute_imports(path, ROOT):
                if module == "peertrain.testing" or module.startswith("peertrain.testing."):
                    offenders.append(f"{path.relative_to(ROOT)}:{lineno} imports {module}")
    assert not offenders, "\n".join(offenders)
