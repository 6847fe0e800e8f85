"""`--plot`: a chart for every trace, and what it marks matches the replay's JSON."""

import json
import subprocess
import sys

import pytest

from conftest import example

pytest.importorskip("matplotlib")
TRACES = ["vllm_startup", "staircase", "sawtooth", "spike", "stray", "tp_imbalance"]


@pytest.mark.parametrize("name", TRACES)
def test_plot_marks_match_the_replay(tmp_path, name):
    from PIL import Image

    png = tmp_path / f"{name}.png"
    r = subprocess.run(
        [sys.executable, "-m", "daemon", "replay", example(name + ".jsonl"), "--json", "--plot", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    summary = lines[-1]["summary"]
    marks = json.loads(Image.open(png).text["oomwatch"])
    assert set(marks["gpus"]) == set(summary["gpus"])
    fired = sorted(
        (t["alert"], round(t["t"], 3))
        for t in lines[:-1]
        if t["state"] == "firing" and t["labels"].get("gpu") is not None
    )
    drawn = sorted((a["alert"], a["t"]) for g in marks["gpus"].values() for a in g["alerts"])
    assert drawn == fired
    for gpu, g in summary["gpus"].items():
        assert marks["gpus"][gpu]["eta_seconds"] == g["eta_seconds"]
    if name == "spike":
        assert len(marks["gpus"]["0"]["spikes"]) == 3
    with Image.open(png) as im:
        assert im.size[0] > 500


def test_plot_without_matplotlib_is_one_line(tmp_path):
    code = (
        "import sys, builtins; real = builtins.__import__\n"
        "def imp(n, *a, **k):\n    if n.startswith('matplotlib'): raise ImportError(n)\n    return real(n, *a, **k)\n"
        "builtins.__import__ = imp\nfrom daemon.cli import main\n"
        f"sys.exit(main(['replay', {example('spike.jsonl')!r}, '--plot', {str(tmp_path / 'x.png')!r}]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and "pip install 'oomwatch[plot]'" in r.stderr and "Traceback" not in r.stderr
