"""The built-in status page in a real headless browser (Debian's chromium), against the daemon replaying."""

import json
import re
import subprocess
import time

import pytest

from conftest import example, free_port, need_binary, stop_process
from servers import start_oomwatch

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium(tmp_path, url, *extra):
    exe = need_binary("chromium")
    r = subprocess.run(
        [exe, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *extra, url],
        capture_output=True,
        text=True,
        timeout=90,
    )
    return r.stdout


@pytest.mark.integration
def test_page_shows_every_card_updates_and_reports_a_down_source(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    p, target = start_oomwatch("--replay", example("tp_imbalance.jsonl"), "--speed", "2", "--engine-url", dead)
    try:
        time.sleep(8)
        dom1 = chromium(tmp_path, f"http://{target}/", "--dump-dom")
        time.sleep(6)
        dom2 = chromium(tmp_path, f"http://{target}/", "--dump-dom")
        shot = tmp_path / "status.png"
        chromium(tmp_path, f"http://{target}/", f"--screenshot={shot}", "--window-size=1200,1000")
    finally:
        stop_process(p)
    for dom in (dom1, dom2):
        assert 'data-gpu="0"' in dom and 'data-gpu="1"' in dom  # every card
        assert re.search(r"\d+\.\d% *</span>", dom) and "GiB" in dom  # with its numbers
        assert f"source engine:{dead}/metrics down" in dom  # a down source is shown, the page still works
        assert "<svg" in dom  # the curve
        assert "last 15 min;" in dom  # the span drawn is the window the JSON carries (README: 15 minutes)
    used1 = re.findall(r'data-gpu="1".*?class="num">([\d.]+)%', dom1, re.S)
    used2 = re.findall(r'data-gpu="1".*?class="num">([\d.]+)%', dom2, re.S)
    assert used1 and used2 and used1 != used2  # it updates as the trace plays (GPU 1 leaks)
    assert shot.exists() and shot.stat().st_size > 10000
    assert "workload.py" not in dom2  # no command lines on the page


def _replayed(trace, until):
    from oomwatch.config import DaemonConfig
    from oomwatch.sampler import Sampler
    from oomwatch.sources.replay import ReplaySource

    clock = [0.0]
    s = Sampler(DaemonConfig(replay=trace), ReplaySource(trace), clock=lambda: clock[0])
    s.sample_job()
    return s, clock


def test_status_json_history_counts_seconds_back_from_now():
    from oomwatch.exporters.status import status

    s, clock = _replayed(example("staircase.jsonl"), 0)
    clock[0] = 60.0
    s.sample_job()
    j = json.loads(json.dumps(status(s.snapshot)))  # what /api/v1/status serves
    for card in j["gpus"]:
        h = card["history"]
        ago = h["seconds_ago"]
        assert h["window"] == "15m" and h["window_seconds"] == 900.0
        assert ago and len(ago) == len(h["used_bytes"]) and len(ago) <= 600
        assert all(a >= 0 for a in ago) and ago[-1] == 0.0  # never negative; the newest point is now
        assert ago == sorted(ago, reverse=True) and ago[0] > 50  # oldest first, a minute of trace shown
    assert j["wall"] is not None and all(a["since"] is not None for a in j["alerts"])
    for g in s.snapshot.gpus:  # the snapshot carries the longer windows too (for slow leaks), same bounds
        assert [h.window for h in g.history] == ["15m", "6h", "7d"]
        assert all(0 < len(h.t) == len(h.used_bytes) <= 600 and h.t[-1] <= s.snapshot.t for h in g.history)


def test_a_published_snapshot_never_changes_afterwards():
    """The exporters' view is a copy: more samples (which overwrite the analysis' ring) leave it as it was."""
    import dataclasses

    s, clock = _replayed(example("staircase.jsonl"), 0)
    clock[0] = 45.0  # the leak is paged by then
    s.sample_job()
    snap = s.snapshot
    assert snap.alerts and snap.findings
    g = snap.gpus[0]
    before = (
        g.window("15m").t,
        g.window("15m").used_bytes,
        snap.samples_total,
        dict(snap.alerts[0].labels) if snap.alerts else None,
    )
    clock[0] = 2000.0  # past the whole window: every bucket of the ring is rewritten
    s.sample_job()
    assert s.snapshot is not snap and s.snapshot.samples_total > snap.samples_total
    assert (
        g.window("15m").t,
        g.window("15m").used_bytes,
        snap.samples_total,
        dict(snap.alerts[0].labels) if snap.alerts else None,
    ) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.gpus[0].verdict.shape = "idle"  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.alerts[0].labels["severity"] = "info"  # type: ignore[index]
    with pytest.raises(TypeError):
        snap.findings[0].evidence["x"] = 1  # type: ignore[index]


def test_status_carries_phase_verdict_episodes_and_the_longer_windows():
    """Issue: the page shows the longer windows (15 min, 6 h, 7 d) and the episodes, not only 15 minutes."""
    from oomwatch.exporters.status import history, routes, status

    s, clock = _replayed(example("tp_imbalance.jsonl"), 0)
    clock[0] = 120.0  # past the end of the trace: GPU 1's leak fired, then its process exited
    s.sample_job()
    j = json.loads(json.dumps(status(s.snapshot)))
    assert {c["phase"] for c in j["gpus"]} <= {"idle", "starting", "serving", "exiting"}
    assert all(c["verdict"] for c in j["gpus"])  # one sentence per card
    eps = [e for e in j["episodes"] if e["gpu"] == "1"]
    assert any(e["alert"] == "GPUMemoryLeak" for e in eps)  # GPU 1 leaked 1 GiB/s
    assert all(e["end"] is not None and e["end"] >= e["start"] for e in j["episodes"])  # the trace ended: all closed
    assert all(e["ended_because"] for e in j["episodes"])
    for w, secs in (("15m", 900.0), ("6h", 21600.0), ("7d", 604800.0)):
        h = history(s.snapshot, w)
        assert h["window"] == w and h["window_seconds"] == secs and len(h["gpus"]) == 2
        assert all(len(c["seconds_ago"]) == len(c["used_bytes"]) > 0 for c in h["gpus"])
        ctype, body = routes(lambda: s.snapshot)[f"/api/v1/history/{w}"]()
        assert ctype == "application/json" and json.loads(body) == h
