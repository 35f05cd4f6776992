"""Each name means one thing (issue 31): no two product classes share a name, and no product
module imports the root package (`peertrain.__version__` comes from the package's metadata)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "dht", "crdt", "swarm", "node")

# Names still defined twice, and why each pair may stay (rename one when you touch it).
SHARED_NAMES = {
    "Ping": "protocol/messages.py's and dht/messages.py's: each protocol's own liveness message",
    "Pong": "the answers to the two `Ping`s above",
    "Codec": "protocol/codecs.py's tensor codec and crdt/wire.py's msgpack codec of one value",
    "RejectReason": "dht/errors.py's (why a record was refused) and swarm/aggregation's "
    "(why an update was refused): both the reason a peer's data was turned away",
    "Dialer": "dht/dialer.py's; node/nat/relays' is `RacingDialer`",
    "Decision": "swarm/aggregation/sharded.py and swarm/exchange/sharded/decide.py: the sharded "
    "exchange's move from aggregation/ into exchange/ (the lead's) leaves one",
}


def _classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(str(path.relative_to(ROOT)))
    return found


def test_no_two_product_classes_share_a_name():
    twice = {name: paths for name, paths in _classes().items() if len(paths) > 1}
    unexplained = {name: paths for name, paths in twice.items() if name not in SHARED_NAMES}
    assert not unexplained, "rename one of each pair (or say why in SHARED_NAMES):\n" + "\n".join(
        f"{name}: {paths}" for name, paths in sorted(unexplained.items())
    )


def test_the_renamed_names_mean_one_thing():
    classes = _classes()
    for name in ("UpdateExchange", "Contribution", "TokenBucket", "ConfigError", "Dialer"):
        assert len(classes.get(name, [])) <= 1, f"{name}: {classes[name]}"


def _imports_the_root(node: ast.AST, package: list[str]) -> bool:
    """`import peertrain`, `from peertrain import …` or a relative import that climbs to it."""
    if isinstance(node, ast.Import):
        return any(alias.name == "peertrain" for alias in node.names)
    if not isinstance(node, ast.ImportFrom):
        return False
    if node.level == 0:
        return node.module == "peertrain"
    return node.module is None and len(package) - node.level + 1 == 1


def test_product_modules_do_not_import_the_root_package():
    offenders = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            package = ["peertrain", *path.relative_to(ROOT).parts[:-1]]
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if _imports_the_root(node, package):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "import from the layer, not the root package:\n" + "\n".join(offenders)


def test_version_comes_from_the_package_metadata():
    from importlib import metadata

    import peertrain

    assert peertrain.__version__ == metadata.version("peertrain")
