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
NODE_SHARED = {"errors", "supervision"}


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


# Inside swarm/ the update exchange sits under the DiLoCo member, the member under its group,
# and simulated attackers on top: a level imports only levels at or below its own. Modules not
# listed (swarm/'s own, models/, data/) are the base every level may use; package __init__s are
# facades that re-export and are not checked.
SWARM_ORDER = [
    ("peertrain.swarm.aggregation", 1),
    ("peertrain.swarm.exchange", 2),
    ("peertrain.swarm.diloco.errors", 3),
    ("peertrain.swarm.diloco.member", 3),
    ("peertrain.swarm.scoring", 3),
    ("peertrain.swarm.diloco.group", 4),
    ("peertrain.swarm.diloco.adversary", 5),
    ("peertrain.swarm.diffusion", 6),
    ("peertrain.swarm.pipeline", 6),
]


def _swarm_level(module: str) -> int:
    for prefix, level in SWARM_ORDER:
        if module == prefix or module.startswith(prefix + "."):
            return level
    return 0


def swarm_upward_imports(root: Path = ROOT) -> list[str]:
    found: dict[str, str] = {}  # "path:line" -> the module named there (the shortest name)
    for path in sorted((root / "swarm").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        mine = _swarm_level(".".join(["peertrain", *path.relative_to(root).with_suffix("").parts]))
        for lineno, module in _absolute_imports(path, root):
            if module.startswith("peertrain.swarm.") and _swarm_level(module) > mine:
                where = f"{path.relative_to(root)}:{lineno}"
                found[where] = min(found.get(where, module), module, key=len)
    return sorted(f"{where} imports {module}" for where, module in found.items())


def test_swarm_levels_import_only_downwards():
    violations = swarm_upward_imports()
    assert not violations, "\n".join(violations)


def test_a_driver_importing_its_attacker_is_caught(tmp_path):
    (tmp_path / "swarm" / "diloco" / "group").mkdir(parents=True)
    (tmp_path / "swarm" / "diloco" / "group" / "driver.py").write_text(
        "from peertrain.swarm.diloco.adversary.forger import Forger\n"
    )
    assert swarm_upward_imports(tmp_path) == [
        "swarm/diloco/group/driver.py:1 imports peertrain.swarm.diloco.adversary.forger"
    ]


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for layer in [*ALLOWED, "testing"]:
        for path in sorted((root / layer).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["peertrain", *parts])] = path
    return found


def import_circles(root: Path = ROOT) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), TYPE_CHECKING included."""
    modules = _modules(root)
    graph = {
        name: sorted({m for _, m in _absolute_imports(path, root) if m in modules} - {name})
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                circles.append(sorted([v, *component]))

    for name in graph:
        if name not in index:
            visit(name)
    return circles


def test_no_import_circles():
    circles = import_circles()
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_a_circle_through_a_type_hint_is_found(tmp_path):
    (tmp_path / "swarm" / "exchange").mkdir(parents=True)
    (tmp_path / "swarm" / "exchange" / "gossip.py").write_text("from .gossip_round import Round\n")
    (tmp_path / "swarm" / "exchange" / "gossip_round.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .gossip import Gossip\n"
    )
    assert import_circles(tmp_path) == [
        ["peertrain.swarm.exchange.gossip", "peertrain.swarm.exchange.gossip_round"]
    ]
