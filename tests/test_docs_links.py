"""The docs live in the repository, and every reference to them resolves.

Whoever clones the project reads README.md, then the pages in docs/ (also built as a site by
`make docs`, from mkdocs.yml). So:

- every relative link in README.md and docs/*.md names a file that exists, and a link's anchor
  (`page.md#heading`) names a heading of that page;
- every mention of a `docs/<page>.md` or `docs/<figure>.png` path in the tree (source, tests,
  benchmarks, pyproject, Makefile, Markdown) names a file that exists, so a comment citing
  "docs/design.md §2" leads somewhere;
- nothing in the tree points at notes the repository does not hold: the old top-level design,
  libp2p and style notes, or a folder of shared notes outside the project;
- README.md stays a short manual of at most 250 lines, and every page is in the site's nav.

`mkdocs build --strict` checks the links within docs/ too, but it needs the docs extra; this
test needs nothing but the tree. The helpers are tested on small trees of their own, so that a
missing file is shown to be caught without breaking the repository.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250
PAGES = [
    "index", "usage", "architecture", "design", "security", "benchmarks", "layout",
    "libp2p-notes", "style",
]  # fmt: skip

SKIPPED_DIRS = {".venv", ".git", "build", "dist", "node_modules", "__pycache__"}
SCANNED_SUFFIXES = {".py", ".toml", ".md", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".sh"}
MAX_SCANNED_BYTES = 2_000_000

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
DOCS_MENTION = re.compile(r"(?<![\w./-])docs/[\w./-]+?\.(?:md|png)\b")
# Built from parts, so that this file does not mention what it forbids.
FORBIDDEN = re.compile(
    r"\b(?:DESIGN|LIBP2P-NOTES|STYLE)\.md\b" + "|" + r"(?<![\w.-])shared" + "/",
)


# -- the tree ---------------------------------------------------------------------------------


def tree_files(root: Path) -> list[Path]:
    """The tree's text files a reader may follow a reference from (no venv, git or build)."""
    found = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(
            p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts[:-1]
        ):
            continue
        if not path.is_file() or path.name.startswith("."):
            continue
        if path.suffix in SCANNED_SUFFIXES or path.name == "Makefile" or path.suffix == "":
            found.append(path)
    return found


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary or very large file."""
    if path.stat().st_size > MAX_SCANNED_BYTES:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def numbered_lines(files: list[Path], root: Path):
    for path in files:
        text = read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            yield f"{path.relative_to(root)}:{number}", line


# -- Markdown ---------------------------------------------------------------------------------


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed: where links and headings are."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) makes it; GitHub agrees on ours."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in `page`; a repeated heading gets `_1`, `_2`, … as in MkDocs."""
    found: set[str] = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = anchor = slug(match.group(2))
        count = 0
        while anchor in found:
            count += 1
            anchor = f"{base}_{count}"
        found.add(anchor)
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """Relative links in `page` whose file does not exist, or whose anchor names no heading."""
    broken = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if SCHEME.match(target):
                continue  # a web address: not ours to check offline
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no such heading)")
    return broken


# -- references in any file -------------------------------------------------------------------


def missing_mentions(files: list[Path], root: Path) -> list[str]:
    """Mentions of `docs/<name>.md` or `.png` paths that name no file of the tree."""
    return [
        f"{where}: {mention}"
        for where, line in numbered_lines(files, root)
        for mention in DOCS_MENTION.findall(line)
        if not (root / mention).is_file()
    ]


def forbidden_references(files: list[Path], root: Path) -> list[str]:
    """Lines that point at notes the repository does not hold."""
    return [
        f"{where}: {line.strip()}"
        for where, line in numbered_lines(files, root)
        if FORBIDDEN.search(line)
    ]


# -- the repository ---------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_docs_page_exists_and_is_in_the_site_nav(page):
    assert (DOCS / f"{page}.md").is_file()
    assert f": {page}.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_every_page_in_docs_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert [p.name for p in sorted(DOCS.glob("*.md")) if f": {p.name}" not in nav] == []


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > len(PAGES)
    assert [b for page in pages for b in broken_links(page, ROOT)] == []


def test_every_mention_of_a_docs_file_names_a_file_that_exists():
    files = tree_files(ROOT)
    assert ROOT / "node" / "net" / "host.py" in files and ROOT / "Makefile" in files
    mentions = [m for _, line in numbered_lines(files, ROOT) for m in DOCS_MENTION.findall(line)]
    assert len(mentions) > 20  # the scan found the code's citations of the docs
    assert missing_mentions(files, ROOT) == []


def test_nothing_points_at_notes_outside_the_repository():
    assert forbidden_references(tree_files(ROOT), ROOT) == []


def test_the_readme_is_a_short_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    assert "make demo" in README.read_text(encoding="utf-8")
    assert any("docs/usage.md" in line for line in lines)


# -- the checks themselves, on small trees ----------------------------------------------------


def small_tree(root: Path) -> Path:
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("# Guide\n\n## 2. How it works\n\n## Setup\n")
    (root / "docs" / "figure.png").write_bytes(b"\x89PNG\r\n")
    return root


@pytest.mark.parametrize(
    ("mention", "found"),
    [
        ("docs/" + "guide.md", False),
        ("docs/" + "figure.png", False),
        ("docs/" + "gone.md", True),
        ("docs/" + "lost.png", True),
        ("docs/" + "sub/guide.md", True),
    ],
)
@pytest.mark.parametrize("name", ["module.py", "pyproject.toml", "Makefile", "NOTES.md"])
def test_a_mention_of_a_missing_docs_file_is_caught(tmp_path, mention, found, name):
    root = small_tree(tmp_path)
    (root / name).write_text(f"first line\n# see {mention} §2, and ({mention})\n")
    expected = [f"{name}:2: {mention}"] * 2 if found else []
    assert missing_mentions(tree_files(root), root) == expected


def test_mentions_in_skipped_folders_are_not_read(tmp_path):
    root = small_tree(tmp_path)
    for folder in (".venv", "build", ".git"):
        (root / folder).mkdir()
        (root / folder / "x.py").write_text("docs/" + "gone.md\n")
    assert missing_mentions(tree_files(root), root) == []


@pytest.mark.parametrize(
    ("link", "problem"),
    [
        ("docs/" + "guide.md", None),
        ("docs/" + "guide.md#setup", None),
        ("docs/" + "guide.md#2-how-it-works", None),
        ("docs/" + "figure.png", None),
        ("https://example.org/nowhere.md", None),
        ("docs/" + "gone.md", "no such file"),
        ("docs/" + "guide.md#teardown", "no such heading"),
    ],
)
def test_a_broken_link_or_anchor_is_caught(tmp_path, link, problem):
    root = small_tree(tmp_path)
    (root / "README.md").write_text(
        f"# Title\n\nSee [the guide]({link}).\n\n```\n[x](no.md)\n```\n"
    )
    expected = [] if problem is None else [f"README.md: {link} ({problem})"]
    assert broken_links(root / "README.md", root) == expected


def test_anchors_are_made_as_the_site_makes_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# py-libp2p 0.8.1: quirks\n## Devices, precision and GPUs\n## Setup\n## Setup\n"
    )
    assert anchors(page) == {
        "py-libp2p-081-quirks", "devices-precision-and-gpus", "setup", "setup_1",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ("see " + "DESIGN" + ".md §2", True),
        ("(" + "LIBP2P-NOTES" + ".md)", True),
        ("per " + "STYLE" + ".md", True),
        ("(" + "shared" + "/" + "STYLE" + ".md: sizes)", True),
        ("/work/" + "shared" + "/notes", True),
        ("see docs/design.md §2 and docs/style.md", False),
        ("a shared_memory/ buffer; torch.shared_memory", False),
    ],
)
def test_a_reference_to_notes_outside_the_repository_is_caught(tmp_path, line, caught):
    (tmp_path / "module.py").write_text(f"# {line}\n")
    assert forbidden_references(tree_files(tmp_path), tmp_path) == (
        [f"module.py:1: # {line}"] if caught else []
    )
