"""Progress in words and bars (issue 18): what the CLI draws from a run's `progress` in status,
what the daemon logs while a wait or a download lasts, and the JSON fields of those lines."""

from __future__ import annotations

import io
import json
import logging

import torch
from peertrain.node.cli.progress_view import progress_lines, progress_view
from peertrain.node.log_setup import JsonLines
from peertrain.protocol.tensors import TensorDownload, prepare_tensor
from peertrain.swarm.progress import Download, ProgressLog

RUN = {
    "name": "digits",
    "run_id": "ab" * 32,
    "mode": "diloco",
    "members": ["a", "b"],
    "round": 3,
    "loss": 1.23456,
    "phase": "inner steps",
    "error": None,
    "finished": False,
}


def progress(**extra):
    base = {"phase": "inner steps", "round": 3, "rounds": 8, "inner_step": 12}
    base.update(inner_steps=20, download=None, waiting=None)
    return {**base, **extra}


def draw(status, width=100) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(progress_view(status))
    return out.getvalue()


def test_inner_steps_and_rounds_are_bars_with_their_figures():
    status = {"run": {**RUN, "progress": progress()}}
    text = draw(status)
    assert "digits  round 3/8  loss 1.2346  members 2  inner steps" in text
    assert "rounds" in text and "3/8" in text
    assert "inner steps" in text and "12/20" in text
    assert "━" in text  # a bar is drawn, not only its figures
    assert progress_lines(status) == [
        "digits  round 3/8  loss 1.2346  members 2  inner steps",
        "  inner steps: 12/20",
    ]


def test_a_download_shows_megabytes_rate_and_donors():
    download = {
        "what": "state of round 12",
        "bytes_done": 34_000_000,
        "bytes_total": 120_000_000,
        "donors": 2,
        "elapsed_s": 2.8,
        "bytes_per_s": 12_300_000,
    }
    run = {**RUN, "phase": "downloading state of round 12"}
    status = {"run": {**run, "progress": progress(phase=run["phase"], download=download)}}
    line = "download state of round 12: 34.0/120.0 MB, 12.3 MB/s, 2 donors"
    assert progress_lines(status)[1:] == [f"  {line}"]
    assert "34.0/120.0 MB, 12.3 MB/s, 2 donors" in draw(status)
    asking = {**download, "bytes_done": 0, "bytes_total": 0, "donors": 1, "bytes_per_s": 0}
    status["run"]["progress"]["download"] = asking  # no header yet: no size to show
    assert progress_lines(status)[1].endswith("asking, 0.0 MB/s, 1 donor")


def test_waiting_for_members_says_how_many_more_and_for_how_long():
    waiting = {"what": "members", "have": 1, "need": 3, "elapsed_s": 12.4}
    run = {**RUN, "round": 0, "phase": "waiting for 3 members", "members": ["a"]}
    status = {"run": {**run, "progress": progress(phase=run["phase"], waiting=waiting)}}
    expected = "waiting for 2 more members (have 1, need 3), 12 s"
    assert progress_lines(status)[1] == f"  {expected}"
    assert expected in draw(status, width=60)


def test_several_runs_each_get_their_lines_and_no_run_draws_nothing():
    other = {**RUN, "name": "other", "run_id": "cd" * 32, "progress": None, "finished": True}
    status = {"run": {"runs": [{**RUN, "progress": progress()}, other]}}
    lines = progress_lines(status)
    assert lines[0].startswith("digits  round 3/8") and lines[-1].endswith("finished")
    assert progress_lines({"run": None}) == [] and draw({"run": None}).strip() == ""


def test_a_download_follows_the_bytes_its_transfer_verified():
    prepared = prepare_tensor("state", torch.arange(3_000_000, dtype=torch.float32))
    transfer = TensorDownload(prepared.header, max_nbytes=prepared.header.nbytes)
    download = Download("state of round 2", donors=3)
    assert download.status()["bytes_total"] == 0
    download.transfer = transfer
    raw = memoryview(prepared.payload.numpy())
    first = prepared.header.chunk_span(0)
    transfer.chunk_buffer(0)[:] = raw[: first[1]]
    transfer.verify_chunk(0)
    transfer.verify_chunk(0)  # verified twice (a resumed range) counts once
    status = download.status()
    assert status["bytes_done"] == first[1] < status["bytes_total"] == 12_000_000
    assert status["donors"] == 3 and status["bytes_per_s"] > 0


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(JsonLines())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_progress_is_logged_at_its_start_then_every_ten_seconds_with_json_fields():
    logger = logging.getLogger("peertrain.test.progress")
    logger.setLevel(logging.INFO)
    records = Records()
    logger.addHandler(records)
    try:
        lines = ProgressLog(logger, every=10.0)
        waiting = {"what": "members", "have": 1, "need": 3, "elapsed_s": 0.0}
        inner = progress(phase="waiting for 3 members", waiting=waiting)
        for now in (100.0, 101.0, 109.0, 110.5):
            lines.update(inner, now)
        lines.update(progress(), 111.0)  # the wait ended; inner steps only once they last
        lines.update(progress(), 120.0)
        lines.update(progress(), 121.5)
    finally:
        logger.removeHandler(records)
    logged = [json.loads(line) for line in records.lines]
    assert [r["event"] for r in logged] == ["waiting", "waiting", "inner_steps"]
    assert logged[0]["msg"] == "waiting for 2 more members (have 1, need 3), 0 s"
    assert logged[0]["have"] == 1 and logged[0]["need"] == 3 and logged[0]["what"] == "members"
    assert logged[2]["msg"] == "round 3: inner steps 12/20"
    assert logged[2]["inner_step"] == 12 and logged[2]["inner_steps"] == 20
    assert all(r["level"] == "info" and r["logger"] == logger.name for r in logged)


def test_json_fields_never_replace_the_line_s_own_keys():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    record.event, record.fields = "download", {"msg": "spoof", "level": "x", "donors": 2}
    line = json.loads(JsonLines().format(record))
    assert line["msg"] == "hello" and line["level"] == "info" and line["donors"] == 2
