"""English text a machine installs from a package registry, with no download script: the
documents `peertrain data prepare-corpus` tokenizes (prepare.py).

    linux-doc   Debian's `linux-doc` package (apt-get install linux-doc): the Linux kernel's
                documentation as reStructuredText, `/usr/share/doc/linux-doc-*/html/_sources`
                (Debian 12's 6.1: 3183 files, 24.2 MB; 23.2 MB once cleaned)
    pydoc       Python's own help topics (pydoc_data, in every Python; 79 topics, 466 kB): small,
                for tests and trials
    PATH        a text file, or a folder of them (every file below it)

Documents are read in sorted relative-path order, so machines with the same package version
collect the same bytes. `clean` drops what is markup rather than prose: section underlines and
table rules (a line of one repeated punctuation character), reStructuredText directive and comment
lines (`.. code-block::`, `.. SPDX-License-Identifier`), trailing blanks and runs of blank lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..models.config import ConfigError

DOC_ROOT = Path("/usr/share/doc")  # where Debian installs documentation packages
LINUX_DOC = "linux-doc-*/html/_sources"  # below DOC_ROOT; the newest version wins
NAMED_SOURCES = ("linux-doc", "pydoc")

_RULE = re.compile(r"^[ \t]*([=\-~^\"'`#*+_.:])\1{2,}[ \t]*$", re.MULTILINE)
_DIRECTIVE = re.compile(r"^\.\.(?:[ \t].*)?$", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Document:
    name: str  # its path relative to the source, or a pydoc topic
    raw: bytes  # as installed (what the cache digest covers)


def documents(source: str, *, doc_root: Path = DOC_ROOT) -> tuple[str, list[Document]]:
    """(where the text was found, its documents) for `source`: a named source or a PATH.
    A named source whose package is missing is a ConfigError naming the package to install."""
    if source == "pydoc":
        from pydoc_data.topics import topics

        return "pydoc_data.topics", [
            Document(name, topics[name].encode("utf-8")) for name in sorted(topics)
        ]
    if source == "linux-doc":
        found = sorted(Path(doc_root).glob(LINUX_DOC))
        if not found:
            raise ConfigError(
                f"the linux-doc corpus needs Debian's linux-doc package (no {doc_root}/"
                f"{LINUX_DOC}): apt-get install linux-doc"
            )
        return str(found[-1]), _folder(found[-1])
    path = Path(source).expanduser()
    if path.is_file():
        return str(path), [Document(path.name, path.read_bytes())]
    if path.is_dir():
        return str(path), _folder(path)
    raise ConfigError(
        f"corpus source {source!r} is neither {' nor '.join(NAMED_SOURCES)} nor a file or folder"
    )


def _folder(root: Path) -> list[Document]:
    files = sorted(
        (p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix()
    )
    if not files:
        raise ConfigError(f"corpus source {root} holds no files")
    return [Document(p.relative_to(root).as_posix(), p.read_bytes()) for p in files]


def clean(raw: bytes) -> str:
    """One document's prose: markup-only lines and runs of blank lines removed."""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    text = _DIRECTIVE.sub("", _RULE.sub("", text))
    return _BLANKS.sub("\n\n", _TRAILING.sub("", text)).strip()
