"""`peertrain run options` as a reader sees it: every line of a setting's meaning sits under the
setting, indented, so the next setting's name is the only thing at the left margin."""

from __future__ import annotations

from peertrain.node.cli.run_options import render


def test_a_long_meaning_wraps_under_its_setting():
    lines = render("diloco").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  exchange  ("))
    meaning = []
    for line in lines[start + 1 :]:
        if not line.startswith("      "):
            break
        meaning.append(line.strip())
    # the comment on `exchange` is two source lines: both are under it (the second was at the
    # left margin, where it read as a setting of its own)
    assert len(meaning) >= 2 and "linear rules only" in " ".join(meaning)
