"""A card's lifecycle (daemon/analysis/lifecycle.py), driven evaluation by evaluation."""

from __future__ import annotations

from oomwatch.analysis.lifecycle import Lifecycle
from oomwatch.config import AnalysisConfig

GiB = float(1 << 30)
CAP = 140 * GiB


def test_a_start_that_holds_steady_was_loaded_at_its_last_rise():
    """A start of shards every 2 s until 20 s, then steady: it is serving once it has held steady for
    `settle_s`, and its allocating ended at its last rise. The allocator probe judges live tensors from
    there, so a leak that begins in the steady stretch is not mistaken for loading."""
    cfg = AnalysisConfig()
    lc = Lifecycle()
    used = 0.0
    phases = {}
    for now in range(0, 60):
        if 1 <= now <= 20 and now % 2 == 0:
            used += 6 * GiB
        phases[now] = lc.update(float(now), used, used, frozenset({7}), {}, None, CAP, cfg)
    assert phases[10] == "starting" and phases[59] == "serving"
    assert lc.serving_since is not None and lc.serving_since >= 20 + cfg.settle_s
    assert lc.loaded_at == 20.0


def test_a_new_start_forgets_when_the_last_one_was_loaded():
    cfg = AnalysisConfig()
    lc = Lifecycle()
    for now in range(0, 40):
        lc.update(float(now), 60 * GiB, 60 * GiB, frozenset({7}), {}, None, CAP, cfg)
    assert lc.phase == "serving" and lc.loaded_at is not None
    lc.update(40.0, 60 * GiB, 60 * GiB, frozenset({8}), {}, None, CAP, cfg)  # a new server process
    assert lc.phase == "starting" and lc.loaded_at is None


def test_a_step_as_large_as_the_least_transient_is_a_high_water_step():
    """A serving card's high-water mark counts steps of at least `transient_min_bytes`, as transients are
    counted: a rank keeping 256 MiB a minute is stepping, and smaller moves are the allocator's noise."""
    cfg = AnalysisConfig()
    lc = Lifecycle()
    used = 60 * GiB
    for now in range(0, 40):
        lc.update(float(now), used, used, frozenset({7}), {}, None, CAP, cfg)
    assert lc.phase == "serving" and len(lc.hw_times) == 0
    for k, now in enumerate(range(40, 400, 60)):
        used += cfg.transient_min_bytes if k % 2 == 0 else cfg.transient_min_bytes - (1 << 20)
        lc.update(float(now), used, used, frozenset({7}), {}, None, CAP, cfg)
        lc.update(float(now + 1), used, used, frozenset({7}), {}, None, CAP, cfg)
    # each step of exactly the least size counts when it comes (levels move on two evaluations' least); a
    # 1 MiB smaller one after it does not, and lifts the next one with it
    assert list(lc.hw_times) == [41.0, 161.0, 281.0]
