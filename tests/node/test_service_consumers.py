"""Each consumer of the node's services states what it uses (issue 31).

`NodeServices` (node/services/node_services.py) and the `Daemon` (node/daemon.py) are bundles:
a class or function that takes one whole must use most of it; one that uses a few fields takes
those fields, or a small Protocol of them. This test finds, by AST, every function with a
parameter annotated with a bundle (and the class that keeps such a parameter on `self`), lists
the bundle's members it touches, and fails when it touches fewer than half of them. Passing the
bundle on whole to another consumer counts as using what that consumer uses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = {
    "NodeServices": ROOT / "node" / "services" / "node_services.py",
    "Daemon": ROOT / "node" / "daemon.py",
}
SEARCHED = ("node", "testing", "benchmarks")

# Consumers that may take a bundle whole though they touch less than half of it, and why.
ALLOWED: dict[str, str] = {
    "node/runs/session.py:RunSession.__init__": "builds the run's RunContext (node/runs/"
    "context.py), which carries the services whole to the run's parts: the pipeline and "
    "diffusion sessions and the DiLoCo driver's adapters, which use most of them together",
    "node/api/serve.py:serve_node": "runs the daemon it is given (the daemon's owner, not a "
    "consumer): starts it, serves its control methods, hands the web service its readings",
}


def bundle_members(path: Path, name: str) -> set[str]:
    """The public members of class `name`: its annotated fields, `self.x = …` attributes,
    properties and methods (a leading underscore is private, not part of the bundle)."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    members = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.add(node.name)
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                members.add(node.attr)
    return {m for m in members if not m.startswith("_")}


@dataclass
class Consumer:
    where: str  # module:qualified name
    bundle: str
    touched: set[str] = field(default_factory=set)
    forwards: set[str] = field(default_factory=set)  # names of callables it passes the bundle to


def _annotation_names(annotation: ast.expr | None) -> set[str]:
    """The types an annotation admits: `X`, `X | None`, `"X"`; not `TaskStatus[X]`."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return {part.strip() for part in annotation.value.split("|")}
    if isinstance(annotation, ast.BinOp):
        return _annotation_names(annotation.left) | _annotation_names(annotation.right)
    if isinstance(annotation, ast.Name):
        return {annotation.id}
    if isinstance(annotation, ast.Attribute):
        return {annotation.attr}
    return set()


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "?")


def _uses(scope: ast.AST, is_bundle, consumer: Consumer) -> None:
    """Record `bundle.member` reads and calls that pass the bundle whole, in `scope`."""
    attrs = {id(n.value) for n in ast.walk(scope) if isinstance(n, ast.Attribute)}
    for node in ast.walk(scope):
        if isinstance(node, ast.Attribute) and is_bundle(node.value):
            consumer.touched.add(node.attr)
        if isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            if any(is_bundle(a) and id(a) not in attrs for a in args):
                consumer.forwards.add(_call_name(node))


def _kept_on_self(function: ast.AST, param: str) -> set[str]:
    """`self.x = param` (or `self.x, … = param, …`): the attributes that hold the bundle."""
    kept = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for held, value in pairs:
                if isinstance(value, ast.Name) and value.id == param:
                    if isinstance(held, ast.Attribute) and _is_self(held.value):
                        kept.add(held.attr)
    return kept


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _consumers_in(path: Path) -> list[Consumer]:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = str(path.relative_to(ROOT))
    found = []
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    owner = {id(f): c for c in classes for f in c.body}
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = function.args
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = {  # `make: type[X] = X` and then `make(bundle)` forwards to X
            a.arg: d.id
            for a, d in [
                *zip(
                    positional[len(positional) - len(arguments.defaults) :],
                    arguments.defaults,
                    strict=True,
                ),
                *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
            ]
            if isinstance(d, ast.Name)
        }
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            bundle = next((b for b in BUNDLES if b in _annotation_names(arg.annotation)), None)
            if bundle is None:
                continue
            cls = owner.get(id(function))
            name = f"{cls.name}.{function.name}" if cls else function.name
            consumer = Consumer(f"{module}:{name}", bundle)

            def is_param(node: ast.AST, param: str = arg.arg) -> bool:
                return isinstance(node, ast.Name) and node.id == param

            _uses(function, is_param, consumer)
            consumer.forwards = {defaults.get(f, f) for f in consumer.forwards}
            kept = _kept_on_self(function, arg.arg) if cls else set()
            if kept:  # the class consumes it: every method's `self.<kept>.member`
                consumer.where = f"{module}:{cls.name}"

                def is_kept(node: ast.AST, kept: set[str] = kept) -> bool:
                    return (
                        isinstance(node, ast.Attribute)
                        and _is_self(node.value)
                        and (node.attr in kept)
                    )

                _uses(cls, is_kept, consumer)
            found.append(consumer)
    return found


def find_consumers() -> list[Consumer]:
    paths = [p for folder in SEARCHED for p in sorted((ROOT / folder).rglob("*.py"))]
    consumers = [c for path in paths for c in _consumers_in(path)]
    return [c for c in consumers if not c.where.endswith(("Daemon.__init__", ":Daemon"))]


def used_members(consumers: list[Consumer]) -> dict[str, set[str]]:
    """Each consumer's members, those of the consumers it forwards the bundle to included."""
    by_name: dict[str, list[Consumer]] = {}
    for consumer in consumers:
        last = consumer.where.rsplit(":", 1)[1].split(".")
        by_name.setdefault(last[-1] if last[-1] != "__init__" else last[0], []).append(consumer)
        by_name.setdefault(last[0], []).append(consumer)
    used = {c.where: set(c.touched) for c in consumers}
    grew = True
    while grew:
        grew = False
        for consumer in consumers:
            for callee in consumer.forwards:
                for other in by_name.get(callee, []):
                    if (
                        other.bundle == consumer.bundle
                        and not used[other.where] <= used[consumer.where]
                    ):
                        used[consumer.where] |= used[other.where]
                        grew = True
    return used


def test_the_search_finds_consumers_and_members():
    members = {name: bundle_members(path, name) for name, path in BUNDLES.items()}
    assert {"host", "gossip", "dht", "home"} <= members["NodeServices"]
    assert {"runs", "status", "config"} <= members["Daemon"]
    assert any(c.bundle == "NodeServices" for c in find_consumers())


def _report() -> list[str]:
    members = {name: bundle_members(path, name) for name, path in BUNDLES.items()}
    consumers = find_consumers()
    used = used_members(consumers)
    lines = []
    for consumer in consumers:
        touched = used[consumer.where] & members[consumer.bundle]
        if 2 * len(touched) < len(members[consumer.bundle]) and consumer.where not in ALLOWED:
            lines.append(
                f"{consumer.where} takes {consumer.bundle} ({len(members[consumer.bundle])} "
                f"members) and uses {len(touched)}: {sorted(touched)}"
            )
    return lines


def test_no_consumer_takes_a_bundle_it_mostly_does_not_use():
    narrow = _report()
    assert not narrow, "pass these the fields (or a small Protocol) instead:\n" + "\n".join(narrow)


@pytest.mark.parametrize("where", sorted(ALLOWED))
def test_every_allowed_exception_still_exists_and_says_why(where):
    assert ALLOWED[where].strip()
    assert where in {c.where for c in find_consumers()}, f"{where} is gone: drop it from ALLOWED"
