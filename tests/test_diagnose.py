"""`oomwatch diagnose` and `oomwatch replay --json`: the content (right finding, PID, ETA), not the wording."""

import json
import subprocess
import sys

import pytest

from conftest import example

EXPECT = {  # trace: (exit status, finding kinds that must be there, kinds that must not)
    "vllm_startup": (0, set(), {"leak", "oom_imminent", "spike_risk", "stray"}),
    "sawtooth": (0, set(), {"leak", "oom_imminent"}),
    "spike": (1, {"spike_risk"}, {"leak", "oom_imminent"}),
    "staircase": (1, {"leak", "oom_imminent"}, {"stray"}),
    "stray": (1, {"stray"}, {"leak", "oom_imminent"}),
    "tp_imbalance": (1, {"imbalance", "leak"}, {"stray"}),
}


def run(*args):
    return subprocess.run([sys.executable, "-m", "oomwatch", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_diagnose_json_over_every_trace(name):
    code, must, must_not = EXPECT[name]
    r = run("diagnose", "--replay", example(name + ".jsonl"), "--json")
    assert r.returncode == code, r.stderr
    s = json.loads(r.stdout)["summary"]
    kinds = {f["kind"] for f in s["findings"]}
    assert must <= kinds and not (must_not & kinds), kinds
    for f in s["findings"]:
        assert set(f) == {"kind", "gpu", "pid", "summary", "evidence", "advice", "severity", "holds"}
        assert f["summary"] and f["advice"]


def test_diagnose_text_names_the_pid_and_the_flag():
    r = run("diagnose", "--replay", example("stray.jsonl"))
    assert r.returncode == 1 and "kill 928" in r.stdout and "28.7 GiB" in r.stdout
    r = run("diagnose", "--replay", example("spike.jsonl"))
    assert "--max-num-batched-tokens" in r.stdout
    r = run("diagnose", "--replay", example("vllm_startup.jsonl"))
    assert r.returncode == 0 and "healthy" in r.stdout.lower() and "Healthy:" in r.stdout


def test_diagnose_staircase_gives_an_eta():
    s = json.loads(run("diagnose", "--replay", example("staircase.jsonl"), "--json").stdout)["summary"]
    oom = [f for f in s["findings"] if f["kind"] == "oom_imminent"][0]
    assert oom["severity"] == "critical" and 0 < oom["evidence"]["eta_seconds"] < 600
    assert s["gpus"]["0"]["eta_seconds"] is not None


def test_replay_json_contract():
    r = run("replay", example("tp_imbalance.jsonl"), "--json")
    assert r.returncode == 0
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    *trans, last = lines
    assert trans
    for t in trans:
        assert set(t) == {"t", "alert", "state", "labels", "summary", "eta_seconds"}
        assert t["state"] in ("firing", "resolved") and t["labels"]["alertname"] == t["alert"]
        assert t["labels"]["severity"] in ("warning", "critical")
    s = last["summary"]
    assert set(s) == {"gpus", "findings", "episodes", "samples", "seconds"}  # DESIGN.md: episodes extend it
    for g in s["gpus"].values():
        assert set(g) == {
            "shape",
            "leak",
            "leak_bytes_per_second",
            "eta_seconds",
            "peak_used_bytes",
            "phase",
            "verdict",
        }
        assert g["phase"] in ("idle", "starting", "serving", "exiting") and g["verdict"]
        assert g["shape"] in ("stable", "staircase", "ramp", "sawtooth", "spike", "idle")
    assert s["samples"] > 900 and 40 < s["seconds"] < 60


def test_findings_say_whether_they_still_hold_at_the_end(tmp_path):
    """The summary describes the end: a leak that ended with its process's OOM no longer holds (its story is in
    the episodes); the stray holds while it is still on the card when the trace ends, and not once it left."""
    s = json.loads(run("diagnose", "--replay", example("staircase.jsonl"), "--json").stdout)["summary"]
    leak = [f for f in s["findings"] if f["kind"] in ("leak", "oom_imminent")]
    assert leak and not any(f["holds"] for f in leak)
    assert any(e["alert"] == "GPUOOMImminent" and e["end"] is not None for e in s["episodes"])
    s = json.loads(run("diagnose", "--replay", example("stray.jsonl"), "--json").stdout)["summary"]
    assert [f["holds"] for f in s["findings"] if f["kind"] == "stray"] == [False]  # everything exited at its end
    with open(example("stray.jsonl"), encoding="utf-8") as f:
        lines = f.readlines()
    cut = tmp_path / "stray_cut.jsonl"
    cut.write_text(lines[0] + "".join(x for x in lines[1:] if json.loads(x).get("t", 0) < 30))  # the stray still there
    s = json.loads(run("diagnose", "--replay", str(cut), "--json").stdout)["summary"]
    assert [f["holds"] for f in s["findings"] if f["kind"] == "stray"] == [True]
