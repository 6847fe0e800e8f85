"""Plain-language reports and the end-of-trace summary: the state now, then what happened (episodes).

Each case here was a wrong sentence once: a card whose process just exited called "idle beside a full
one", a card at 81% described by a plateau of 20%, headroom 0 on an empty card, a past leak projected onto
an idle card.
"""

import json

import synth
from conftest import example, shared
from oomwatch.analysis.analyzer import Analyzer
from oomwatch.feed import replay_trace
from oomwatch.report import card_line, render


def test_a_card_whose_leaking_process_just_exited_is_not_called_idle():
    res = replay_trace(example("tp_imbalance.jsonl"))
    text = render(res.analyzer, res.summary)
    assert "sits idle" not in text and "--tensor-parallel-size" not in text
    kinds = {(f["kind"], f["gpu"]) for f in res.summary["findings"]}
    assert ("leak", "1") in kinds
    assert not [f for f in res.summary["findings"] if f["kind"] == "imbalance" and f["evidence"]["kind"] == "idle_card"]


def test_card_line_tells_the_level_the_card_sat_at():
    res = replay_trace(example("stray.jsonl"))
    a = res.analyzer
    st = a.gpus[0]
    line = card_line(a, st)
    assert "20.5%" not in line and "in 0 s" not in line
    # The server and the orphan held ~81% of the card before they exited; the line says so.
    assert "81" in line, line


def test_headroom_of_an_idle_card_is_its_free_memory():
    a = Analyzer(synth.info(1))
    for s in synth.trace([lambda t: 0], 5):
        a.add_sample(s)
    v = a.gpus[0].verdict
    assert v.shape == "idle" and v.headroom_bytes == a.gpus[0].capacity_bytes


def test_summary_tells_the_end_and_the_episodes():
    res = replay_trace(example("staircase.jsonl"))
    s = res.summary
    g = s["gpus"]["0"]
    assert g["phase"] == "idle" and g["verdict"].startswith("Idle now")
    assert "full in" not in g["verdict"]  # never a past rate projected onto an idle card
    assert g["leak"] and g["shape"] == "staircase"  # the last busy period's shape, kept for the record
    eps = [e for e in s["episodes"] if e["alert"] == "GPUOOMImminent"]
    assert len(eps) == 1 and eps[0]["gpu"] == "0" and eps[0]["leak_bytes_per_second"] > 0
    assert eps[0]["evidence"]


def test_replay_json_has_phase_verdict_and_episodes():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "oomwatch", "replay", "--json", example("tp_imbalance.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    summary = json.loads(out[-1])["summary"]
    assert set(summary["gpus"]["1"]) >= {"shape", "leak", "eta_seconds", "phase", "verdict"}
    assert isinstance(summary["episodes"], list) and summary["episodes"]
    keys = {
        "alert",
        "gpu",
        "pid",
        "start",
        "end",
        "shape",
        "leak_bytes_per_second",
        "eta_seconds",
        "evidence",
        "ended_because",
    }
    assert all(keys <= set(e) for e in summary["episodes"])


def test_healthy_cache_growth_is_named_not_paged():
    res = replay_trace(shared("traces", "serving_cache_growth.jsonl"))
    kinds = {f["kind"] for f in res.summary["findings"]}
    assert "cache_growth" in kinds and "no_headroom" in kinds
    assert not [t for t in res.transitions if t.alert.alertname in ("GPUOOMImminent", "GPUMemoryLeak")]
