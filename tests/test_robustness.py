"""A recorder that is not ours: the real recordings read with jitter, lost readings, stalls and a few MiB of
noise (bench/robustness.py) raise no false page and no false leak warning that the recording as made does not.

Traces from other hands differ in how they were sampled; a verdict that holds only for our sampler's exact
readings would fail on theirs. The perturbations change the recorder, never the truth, so the gate is
bench/detection.py's own scorer.
"""

from __future__ import annotations

import os
import random
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import detection as D  # noqa: E402, N812
from bench import robustness as R  # noqa: E402, N812
from conftest import SHARED, shared  # noqa: E402
from oomwatch.model import GpuSample, ProcInfo, Sample  # noqa: E402

TRACES_DIR = os.path.join(SHARED, "traces")
TRACES = sorted(f for f in os.listdir(TRACES_DIR) if f.endswith(".jsonl")) if os.path.isdir(TRACES_DIR) else []


def _recs(n: int = 1300) -> list:
    out: list = [ProcInfo(7, "python3", ("python3",), 1, 0.0)]
    for k in range(n):
        used = (40 << 30) + k * (1 << 20)
        out.append(Sample(0.1 * k, (GpuSample(0, used, (100 << 30) - used, 0, 0, ((7, used),)),)))
    return out


@pytest.mark.parametrize("name", sorted(R.PERTURBATIONS))
def test_a_perturbation_keeps_the_readings_in_order_and_the_other_records(name):
    recs = _recs()
    out = R.PERTURBATIONS[name](recs, random.Random(1))
    samples = [r for r in out if isinstance(r, Sample)]
    assert [r for r in out if not isinstance(r, Sample)] == recs[:1]
    assert all(a.t < b.t for a, b in zip(samples, samples[1:], strict=False))
    assert 0 < len(samples) <= 1300
    assert out != recs  # it did perturb something
    for s in samples:  # the card's capacity is the recorder's, not the perturbation's
        g = s.gpus[0]
        assert g.used_bytes is not None and g.free_bytes is not None
        assert g.used_bytes + g.free_bytes == 100 << 30


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES or ["staircase.jsonl"])
def test_a_real_recording_read_by_another_recorder_raises_no_new_false_alert(name):
    item = shared("traces", name)
    base = D.run_one(item)
    assert "error" not in base, base.get("error")
    for p in sorted(R.PERTURBATIONS):
        r = D.run_one(item, R._transform(p, item))
        assert "error" not in r, (p, r.get("error"))
        assert r["false_pages"] <= base["false_pages"], (p, r["fail"])
        assert r["false_leaks"] <= base["false_leaks"], (p, r["fail"])
