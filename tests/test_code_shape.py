"""Code shape: no module over 400 lines unless its docstring says why, no function over 60 lines.

Product code, tests, benchmarks and examples alike (docs/style.md: modules of 100–300 lines with
one concept, functions of about 8–15 lines, a few up to ~40). A module that must stay longer says
why in its docstring, on a line that starts with `LONG_MODULE_MARKER`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60  # from `def` (its decorators not counted) to its last line
LONG_MODULE_MARKER = "Why this module is long:"
SKIPPED_DIRS = {".venv", "build", "dist", "node_modules", "__pycache__"}


def shape_violations(source: str, name: str) -> list[str]:
    """What in `source` (the module `name`) breaks the two limits, one line per offence."""
    tree = ast.parse(source, filename=name)
    found = []
    lines = len(source.splitlines())
    docstring = ast.get_docstring(tree) or ""
    explained = any(line.strip().startswith(LONG_MODULE_MARKER) for line in docstring.splitlines())
    if lines > MAX_MODULE_LINES and not explained:
        found.append(
            f"{name}: {lines} lines (> {MAX_MODULE_LINES}) and no '{LONG_MODULE_MARKER}' "
            "line in its docstring"
        )
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{name}:{node.lineno} {node.name}() is {length} lines (> {MAX_FUNCTION_LINES})"
                )
    return found


def python_files(root: Path = ROOT) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*.py")
        if not any(
            part in SKIPPED_DIRS or part.startswith(".") or part.endswith(".egg-info")
            for part in path.relative_to(root).parts[:-1]
        )
    )


def test_no_module_or_function_in_the_tree_is_too_long():
    files = python_files()
    assert len(files) > 300  # the walk found the tree (product, tests, benchmarks)
    assert ROOT / "tests" / "test_code_shape.py" in files
    violations = [
        v for path in files for v in shape_violations(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not violations, "\n".join(violations)


def _function(name: str, body_lines: int, *, is_async: bool = False, indent: str = "") -> str:
    head = f"{indent}{'async ' if is_async else ''}def {name}():\n"
    return head + "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))


def test_a_function_of_61_lines_is_caught_and_one_of_60_is_not():
    assert shape_violations(_function("fine", 59), "m.py") == []
    assert shape_violations(_function("long", 60), "m.py") == ["m.py:1 long() is 61 lines (> 60)"]
    method = "class C:\n" + _function("method", 60, is_async=True, indent="    ")
    assert shape_violations(method, "m.py") == ["m.py:2 method() is 61 lines (> 60)"]
    nested = "def outer():\n" + _function("inner", 70, indent="    ") + "    return 1\n"
    assert [v.split(" is ")[0] for v in shape_violations(nested, "m.py")] == [
        "m.py:1 outer()",
        "m.py:2 inner()",
    ]


def test_a_module_over_400_lines_needs_the_marker_in_its_docstring():
    body = "".join(f"x{i} = {i}\n" for i in range(400))
    assert shape_violations('"""Short."""\n' + body[: -len("x399 = 399\n")], "m.py") == []
    caught = shape_violations('"""Short."""\n' + body, "m.py")
    assert caught and caught[0].startswith("m.py: 401 lines (> 400)")
    explained = f'"""Long.\n\n{LONG_MODULE_MARKER} it is a table.\n"""\n' + body
    assert shape_violations(explained, "m.py") == []
    # the marker must be in the docstring, not merely somewhere in the file
    elsewhere = f'"""Long."""\n# {LONG_MODULE_MARKER} a comment is no docstring\n' + body
    assert len(shape_violations(elsewhere, "m.py")) == 1
