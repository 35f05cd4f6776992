"""The wheel ships every package folder of the layers (setuptools needs each one listed)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("protocol", "dht", "crdt", "swarm", "node", "testing")  # testing: for users' tests too


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {"peertrain"} | {
        "peertrain." + ".".join(init.parent.relative_to(ROOT).parts)
        for layer in LAYERS
        for init in (ROOT / layer).rglob("__init__.py")
    }
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == set(), "these listed packages do not exist"


def test_tests_scripts_and_benchmarks_stay_out_of_the_wheel():
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert not any(p.split(".")[1:2] in (["tests"], ["scripts"], ["benchmarks"]) for p in listed)
