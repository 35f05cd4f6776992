"""What a local swarm's report says each catch-up cost comes from the members' own logs, in the
format the daemon writes them (node/log_setup.py's JSON lines): every finished state download,
over all of a member's lives, with the rounds it had missed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from peertrain.node.cli.swarm_events import catch_ups
from peertrain.node.log_setup import JsonLines


@dataclass
class Logged:
    log_path: Path


def download_line(what: str, nbytes: int, seconds: float, donors: int, **more) -> str:
    record = logging.LogRecord("peertrain.swarm", logging.INFO, __file__, 1, "fetched", (), None)
    record.event = "download_done"
    record.fields = {
        "what": what,
        "bytes_done": nbytes,
        "bytes_total": nbytes,
        "donors": donors,
        "elapsed_s": seconds,
        "bytes_per_s": round(nbytes / seconds),
        **more,
    }
    return JsonLines().format(record)


def test_each_download_in_each_life_is_one_catch_up_with_its_rounds_missed(tmp_path):
    killed = tmp_path / "node2.log"
    killed.write_text(
        "\n".join(
            [
                download_line("state of round 7 (catching up from round 3)", 8 << 20, 0.5, 3),
                "Traceback (most recent call last): a line that is not JSON",
                download_line("state of round 9", 8 << 20, 0.25, 2),  # a repair, not behind
            ]
        )
    )
    quiet = tmp_path / "node0.log"
    quiet.write_text('{"msg": "round 9 closed", "event": "round_closed"}\n')
    found = catch_ups([Logged(quiet), Logged(killed), Logged(tmp_path / "never-started.log")])
    assert found == [
        {"node": 1, "round": 7, "rounds_missed": 4, "mb": 8.0, "seconds": 0.5,
         "mb_per_s": 16.0, "donors": 3},
        {"node": 1, "round": 9, "rounds_missed": None, "mb": 8.0, "seconds": 0.25,
         "mb_per_s": 32.0, "donors": 2},
    ]  # fmt: skip


def test_the_rounds_come_from_the_events_own_fields_when_it_has_them(tmp_path):
    log = tmp_path / "node1.log"
    log.write_text(download_line("a state", 4 << 20, 1.0, 3, round=12, from_round=5) + "\n")
    [found] = catch_ups([Logged(tmp_path / "node0.log"), Logged(log)])
    assert (found["node"], found["round"], found["rounds_missed"]) == (1, 12, 7)
