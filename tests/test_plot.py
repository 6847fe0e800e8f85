"""`--plot`: a chart for every trace, and what it marks matches the replay's JSON: alerts, ETA, spikes, the
windows drawn per card (the whole trace, then each kept window shorter than it) and the episodes."""

import json
import subprocess
import sys

import pytest

from conftest import example

pytest.importorskip("matplotlib")
TRACES = ["vllm_startup", "staircase", "sawtooth", "spike", "stray", "tp_imbalance"]
#: The windows the history keeps and the bucket each is drawn at (AnalysisConfig.history_levels).
KEPT = [(604800.0, 60.0), (21600.0, 1.0), (900.0, 0.25)]


def replay_plot(trace, png):
    """`replay TRACE --json --plot PNG`: (the transitions, the summary, the chart's metadata)."""
    from PIL import Image

    r = subprocess.run(
        [sys.executable, "-m", "oomwatch", "replay", str(trace), "--json", "--plot", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    with Image.open(png) as im:
        assert im.size[0] > 500
        marks = json.loads(im.text["oomwatch"])
    return lines[:-1], lines[-1]["summary"], marks


def expected_windows(seconds):
    """(window seconds, bucket seconds) per panel: the whole trace at the finest level that spans it, then
    each kept window shorter than the trace."""
    whole = min(seconds, KEPT[0][0])
    first = min((k for k in KEPT if k[0] >= whole), key=lambda k: k[0])
    return [(whole, first[1])] + [k for k in KEPT if k[0] < whole]


def assert_windows_and_episodes(summary, marks):
    seconds = summary["seconds"]
    for gpu, g in marks["gpus"].items():
        ws = g["windows"]
        want = expected_windows(seconds)
        assert [w["bucket_s"] for w in ws] == [b for _, b in want]
        assert [w["seconds"] for w in ws] == pytest.approx([s for s, _ in want], abs=1e-3)
        for w in ws:
            assert w["to"] == pytest.approx(seconds, abs=1e-3)
            assert w["from"] == pytest.approx(max(seconds - w["seconds"], 0.0), abs=1e-3)
            assert 0 < w["buckets"] <= w["seconds"] / w["bucket_s"] + 2
        # max per bucket: the whole-trace panel keeps the card's peak, and no shorter window exceeds it
        assert ws[0]["peak_bytes"] == summary["gpus"][gpu]["peak_used_bytes"]
        assert all(w["peak_bytes"] <= ws[0]["peak_bytes"] and w["floor_bytes"] <= w["peak_bytes"] for w in ws)
        mine = [e for e in summary["episodes"] if e["gpu"] in (None, gpu)]
        drawn = g["episodes"]
        assert [(e["alert"], e["start"], e["end"], e["ended_because"]) for e in drawn] == [
            (e["alert"], e["start"], e["end"], e["ended_because"]) for e in mine
        ]
        t0 = marks["t0"]  # episode and alert times are the trace's; panel windows count from its start
        for e in drawn:
            assert e["open"] == (e["end"] is None)
            end = seconds if e["end"] is None else e["end"] - t0
            # drawn in exactly the panels whose window it overlaps
            assert e["panels"] == [i for i, w in enumerate(ws) if end >= w["from"] - 1e-3]
            if e["leak_bytes_per_second"]:
                assert "MiB/" in e["label"] and ("OOM in" in e["label"]) == (e["eta_seconds"] is not None)


@pytest.mark.parametrize("name", TRACES)
def test_plot_marks_match_the_replay(tmp_path, name):
    trans, summary, marks = replay_plot(example(name + ".jsonl"), tmp_path / f"{name}.png")
    assert set(marks["gpus"]) == set(summary["gpus"])
    fired = sorted(
        (t["alert"], round(t["t"], 3)) for t in trans if t["state"] == "firing" and t["labels"].get("gpu") is not None
    )
    drawn = sorted((a["alert"], a["t"]) for g in marks["gpus"].values() for a in g["alerts"])
    assert drawn == fired
    for gpu, g in summary["gpus"].items():
        assert marks["gpus"][gpu]["eta_seconds"] == g["eta_seconds"]
    if name == "spike":
        assert len(marks["gpus"]["0"]["spikes"]) == 3
    # a short trace: one panel per card, the whole trace at full resolution, every episode on it
    assert_windows_and_episodes(summary, marks)
    assert all(len(g["windows"]) == 1 for g in marks["gpus"].values())
    if name in ("staircase", "spike", "tp_imbalance"):
        assert summary["episodes"], "these traces page, so the chart must mark an episode"


def test_plot_without_matplotlib_is_one_line(tmp_path):
    code = (
        "import sys, builtins; real = builtins.__import__\n"
        "def imp(n, *a, **k):\n    if n.startswith('matplotlib'): raise ImportError(n)\n    return real(n, *a, **k)\n"
        "builtins.__import__ = imp\nfrom oomwatch.cli import main\n"
        f"sys.exit(main(['replay', {example('spike.jsonl')!r}, '--plot', {str(tmp_path / 'x.png')!r}]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and "pip install 'oomwatch[plot]'" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def long_leak(tmp_path_factory):
    """A generated 12-hour trace of a 500 MB/hour leak (bench/scenarios), and its first 2 hours."""
    from bench.scenarios import SCENARIOS, write

    d = tmp_path_factory.mktemp("long")
    full = d / "leak12h.jsonl"
    write(SCENARIOS["leak_500mb_per_hour_h100"], str(full))
    part = d / "leak2h.jsonl"
    with open(full, encoding="utf-8") as src, open(part, "w", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if i == 0 or json.loads(line).get("t", 0.0) < 2 * 3600:
                dst.write(line)
    return full, part


def test_plot_long_trace_draws_each_window_and_the_leak_episode(tmp_path, long_leak):
    trans, summary, marks = replay_plot(long_leak[0], tmp_path / "leak12h.png")
    assert summary["seconds"] > 6 * 3600
    g = marks["gpus"]["0"]
    # 12 h: the whole trace (from the 1-minute level), the last 6 h (1 s) and the last 15 min (0.25 s)
    assert [w["label"] for w in g["windows"]] == ["whole trace (12.0 h)", "last 6 h", "last 15 min"]
    assert [w["bucket_s"] for w in g["windows"]] == [60.0, 1.0, 0.25]
    assert_windows_and_episodes(summary, marks)
    leaks = [e for e in g["episodes"] if e["alert"] == "GPUMemoryLeak"]
    assert leaks, "the leak pages within the trace, so its episode is on the chart"
    # still leaking when the trace ends: an open span to the end, on every panel, with its rate and ETA
    last = leaks[-1]
    assert last["open"] and last["panels"] == [0, 1, 2]
    mib_h = round(last["leak_bytes_per_second"] * 3600 / (1 << 20))
    assert f"{mib_h} MiB/h" in last["label"] and "OOM in" in last["label"]
    assert (last["alert"], last["start"]) in [(t["alert"], t["t"]) for t in trans if t["state"] == "firing"]
    assert g["eta_seconds"] == summary["gpus"]["0"]["eta_seconds"]
    # the floor rises across the last 6 hours: the zoomed window starts below where the trace ends
    six = g["windows"][1]
    assert six["floor_bytes"] < six["peak_bytes"] - 500e6


def test_plot_two_hour_trace_adds_only_the_last_15_minutes(tmp_path, long_leak):
    _, summary, marks = replay_plot(long_leak[1], tmp_path / "leak2h.png")
    assert 3600 < summary["seconds"] < 2 * 3600
    g = marks["gpus"]["0"]
    assert [w["label"] for w in g["windows"]] == [f"whole trace ({summary['seconds'] / 60:.0f} min)", "last 15 min"]
    assert [w["bucket_s"] for w in g["windows"]] == [1.0, 0.25]
    assert_windows_and_episodes(summary, marks)
