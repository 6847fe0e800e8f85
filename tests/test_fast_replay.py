"""#22: `--replay --speed 1e6 --loop` ends at --duration, stops promptly on SIGTERM and keeps its log short:
one poll plays a bounded share of the trace, and the lines that repeat at every pass have a budget."""

import logging
import re
import subprocess
import time

from conftest import daemon_run_argv, example, free_port, stop_process
from oomwatch.logbudget import LogBudget
from oomwatch.sources.replay import MAX_RECORDS_PER_POLL, ReplaySource

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a log record's first line


def test_one_poll_plays_a_bounded_share_of_a_fast_loop():
    clock = [0.0]
    src = ReplaySource(example("staircase.jsonl"), speed=1e6, loop=True, clock=lambda: clock[0])
    src.poll()
    clock[0] = 10.0  # ten seconds at 1e6x: 1e7 s of trace are due
    t0 = time.perf_counter()
    got = src.poll()
    assert len(got) == MAX_RECORDS_PER_POLL and time.perf_counter() - t0 < 2.0
    assert src.passes > 1 and not src.finished


def test_the_log_budget_counts_what_it_holds_back(caplog):
    now = [0.0]
    b = LogBudget("things", burst=3, window_s=10.0, clock=lambda: now[0])
    lg = logging.getLogger("oomwatch.test")
    with caplog.at_level(logging.INFO, logger="oomwatch.test"):
        for _ in range(50):
            b.log(lg, logging.INFO, "thing")
        now[0] = 11.0
        b.log(lg, logging.INFO, "thing")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["thing"] * 3 + ["47 more things not logged in the last 10 s", "thing"]


def _run(*args):
    return subprocess.Popen(
        daemon_run_argv(free_port(), "--replay", example("staircase.jsonl"), "--speed", "1e6", "--loop", *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_duration_ends_it_on_time_and_the_log_stays_short():
    t0 = time.monotonic()
    p = _run("--duration", "4")
    try:
        rc = p.wait(timeout=30)
        took = time.monotonic() - t0
        err = p.stderr.read()
    finally:
        stop_process(p)
    records = [line for line in err.splitlines() if STAMP.match(line)]
    assert rc == 0 and took < 4 + 4.0, took  # start-up, then 4 s, then a prompt stop
    assert len(records) < 120, len(records)  # not thousands


def test_sigterm_stops_it_promptly():
    p = _run()
    try:
        time.sleep(3.0)
        assert p.poll() is None
        t0 = time.monotonic()
        p.terminate()
        rc = p.wait(timeout=15)
        assert time.monotonic() - t0 < 3.0 and rc == 0
    finally:
        stop_process(p)


def test_a_loop_plays_every_reading_at_its_time_in_the_pass(tmp_path):
    """Host RSS readings (and the probes' readings) move with the samples at each pass: left at their first
    pass' times, the host-RAM trend would see time run back at every loop."""
    from oomwatch.model import GpuInfo, GpuSample, RssSample, Sample
    from oomwatch.trace import header_line, rss_line, sample_line

    gpus = [GpuInfo(0, "NVIDIA H200", "GPU-0", 141 << 30)]
    path = tmp_path / "loop.jsonl"
    with open(path, "w") as f:
        f.write(header_line(gpus, 1.0) + "\n")
        for t in range(5):
            f.write(sample_line(Sample(float(t), [GpuSample(0, 1 << 30, 140 << 30)])) + "\n")
            f.write(rss_line(RssSample(float(t) + 0.5, [(42, 1 << 20)])) + "\n")
    clock = [0.0]
    src = ReplaySource(str(path), speed=1.0, loop=True, clock=lambda: clock[0])
    got = []
    while clock[0] < 12.0:
        got += src.poll()
        clock[0] += 0.25
    rss = [r.t for r in got if isinstance(r, RssSample)]
    samples = [s.t for s in got if isinstance(s, Sample)]
    assert src.passes >= 2 and len(rss) > 5
    assert rss == sorted(rss) and samples == sorted(samples)  # nothing goes back in time at a new pass
    assert max(rss) > 5.0  # the second pass' readings at its own times
