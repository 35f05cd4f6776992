"""Dependencies point one way (DESIGN.md §1): each layer imports only the layers below it."""

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
