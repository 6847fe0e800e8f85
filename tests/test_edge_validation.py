# ruff: noqa: UP031 - JSON text templates: %-formatting keeps the braces of the JSON readable
"""#22: input is validated where it enters. A trace header's total is a finite number of bytes above 0; a
line with impossible values is skipped and counted with one warning line; byte counts are clipped into
[0, total]; time never runs backwards; a state file nested too deep is set aside with one line; a probe file
of a dead server is ignored and removed at once."""

import json
import logging
import os
import time

import pytest
from test_cli import one_line_exit_2, oomwatch

from oomwatch import state
from oomwatch.analysis.analyzer import Analyzer
from oomwatch.model import GpuInfo, Sample
from oomwatch.report import _pct
from oomwatch.sources.allocator import AllocatorSource
from oomwatch.trace import TraceError, read_trace

UUID = "GPU-edge-0"
TOTAL = 1000


def header(total=TOTAL):
    return '{"format":"gpu-memory-trace/1","gpus":[{"index":0,"name":"g","uuid":"%s","total":%s}]}' % (UUID, total)


def sample(t, used, free=None):
    free = TOTAL - used if free is None else free
    return '{"t":%s,"gpus":[{"i":0,"used":%s,"free":%s,"procs":[]}]}' % (t, used, free)


def write(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


@pytest.mark.parametrize("total", ["0", "-5", "0.5", "1e400", "Infinity", "-Infinity", "NaN", "true", '"8"'])
def test_a_header_total_that_is_no_positive_finite_byte_count_is_refused(tmp_path, total):
    with pytest.raises(TraceError, match="total"):
        read_trace(write(tmp_path, [header(total), sample(0, 1)]))


def test_the_cli_says_so_in_one_line_and_exits_2(tmp_path):
    p = write(tmp_path, [header("0"), sample(0, 0)])
    one_line_exit_2(oomwatch("replay", p), "total")


def test_impossible_lines_are_skipped_counted_and_told_once(tmp_path, caplog):
    lines = [
        header(),
        sample(0, 100),
        sample("NaN", 100),  # t not finite
        sample(1, "Infinity", 0),  # used not finite
        sample(2, -42, 1042),  # used negative: clipped to 0, free to the total
        sample(3, 2024, 0),  # used above the total: clipped
        sample(1.5, 300),  # time runs backwards
        sample(4, 400),
    ]
    with caplog.at_level(logging.WARNING, logger="oomwatch.trace"):
        _, it = read_trace(write(tmp_path, lines))
        recs = [r for _, r in it if isinstance(r, Sample)]
    assert [r.t for r in recs] == [0, 2, 3, 4]
    assert [(r.gpus[0].used_bytes, r.gpus[0].free_bytes) for r in recs] == [
        (100, 900),
        (0, 1000),
        (1000, 0),
        (400, 600),
    ]
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "skipped 3 line(s)" in msgs[0] and "line 3" in msgs[0], msgs


def test_used_outside_the_card_never_shows_as_below_0_or_above_100_percent(tmp_path):
    p = write(tmp_path, [header(), sample(0, -42, 1042), *(sample(t, 2024, 0) for t in range(1, 30))])
    r = oomwatch("replay", p)
    assert r.returncode == 0, r.stderr
    assert "-4.2%" not in r.stdout and "202.4%" not in r.stdout and "Traceback" not in r.stderr
    assert "100.0% used now" in r.stdout


def test_a_card_of_no_known_size_shows_bytes_not_a_division_by_zero():
    assert _pct(5 << 30, 0) == "5.0 GiB"


def test_a_deeply_nested_state_file_is_set_aside_with_one_line(tmp_path, caplog):
    path = tmp_path / f"{UUID}.json"
    path.write_text('{"format":"oomwatch-state/1","uuid":"%s","history":%s}' % (UUID, "[" * 100_000))
    a = Analyzer((GpuInfo(0, "g", UUID, TOTAL),))
    with caplog.at_level(logging.WARNING, logger="oomwatch.state"):
        assert state.load(a, str(tmp_path)) == 0
    assert len(caplog.records) == 1 and "set aside" in caplog.records[0].getMessage()
    assert (tmp_path / f"{UUID}.json.bad").exists() and not path.exists()


def test_a_state_file_with_nan_times_is_set_aside(tmp_path, caplog):
    a = Analyzer((GpuInfo(0, "g", UUID, TOTAL),))
    state.save(a, str(tmp_path))
    path = tmp_path / f"{UUID}.json"
    doc = json.loads(path.read_text())
    doc["history"][0].update(t="AAAAAAAA+H8=", min="AAAAAAAA+H8=", max="AAAAAAAA+H8=", last="AAAAAAAA+H8=")
    path.write_text(json.dumps(doc))
    b = Analyzer((GpuInfo(0, "g", UUID, TOTAL),))
    with caplog.at_level(logging.WARNING, logger="oomwatch.state"):
        assert state.load(b, str(tmp_path)) == 0
    assert "not finite" in caplog.records[0].getMessage() and len(b.gpus[0].history) == 0


def probe(d, pid, t, interval=1.0):
    doc = {
        "format": "oomwatch-probe/1",
        "pid": pid,
        "time": t,
        "interval_s": interval,
        "devices": [{"uuid": UUID, "index": 0, "allocated_bytes": 5, "reserved_bytes": 8}],
    }
    (d / f"{pid}.json").write_text(json.dumps(doc))


def test_a_dead_servers_fresh_probe_file_is_ignored_and_removed_at_once(tmp_path):
    """The server's last file is fresh (within 1.5 intervals) when it dies: read on, it kept the dead
    process's allocator memory in the analysis (GPUMemoryLeak fired and resolved a second time)."""
    now = [1000.0]
    alive = {41}
    src = AllocatorSource(
        [GpuInfo(0, "g", UUID, TOTAL)], str(tmp_path), clock=lambda: now[0], pid_alive=alive.__contains__
    )
    probe(tmp_path, 41, now[0] - 0.1, interval=10.0)
    assert [a.pid for a in src.poll(1.0)] == [41]
    alive.clear()  # the server dies; its file is 0.2 s old of a 10 s interval
    now[0] += 0.1
    assert src.poll(2.0) == [] and not (tmp_path / "41.json").exists() and src.removed == 1


def test_probe_files_with_impossible_numbers_are_skipped(tmp_path):
    src = AllocatorSource([GpuInfo(0, "g", UUID, TOTAL)], str(tmp_path), clock=time.time, pid_alive=lambda p: True)
    base = '{"format":"oomwatch-probe/1","pid":%d,"time":%s,"interval_s":1,"devices":[{"uuid":"%s",'
    (tmp_path / "51.json").write_text(base % (51, "NaN", UUID) + '"allocated_bytes":1,"reserved_bytes":1}]}')
    (tmp_path / "52.json").write_text(base % (52, time.time(), UUID) + '"allocated_bytes":1e400,"reserved_bytes":1}]}')
    (tmp_path / "53.json").write_text(base % (53, time.time(), UUID) + '"allocated_bytes":-3,"reserved_bytes":1}]}')
    assert src.poll(1.0) == [] and src.status.up
    assert sorted(os.listdir(tmp_path)) == ["51.json", "52.json", "53.json"]
