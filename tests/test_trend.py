"""The trend statistics against scipy's, and the rules that keep a step or a plateau from being a leak."""

import numpy as np
import pytest
from scipy import stats

from oomwatch.analysis.trend import damped_rise, floor_trend, mann_kendall, steady_steps_p, theil_sen
from oomwatch.config import AnalysisConfig

CFG = AnalysisConfig()


@pytest.mark.parametrize("seed", range(5))
def test_mann_kendall_and_theil_sen_match_scipy(seed):
    rng = np.random.default_rng(seed)
    x = np.arange(32.0)
    y = np.round(0.3 * x + rng.normal(0, 2, 32))  # rounded: ties, as a floor in MiB has
    s, z = mann_kendall(y)
    tau = stats.kendalltau(x, y)  # tau-b; S = tau * sqrt((n0 - n1) * (n0 - n2)) with n1 = 0 (x has no ties)
    n0 = 32 * 31 / 2
    _, counts = np.unique(y, return_counts=True)
    n2 = float(np.sum(counts * (counts - 1) / 2))
    assert s == pytest.approx(tau.statistic * np.sqrt(n0 * (n0 - n2)), abs=1e-6)
    slope, lo, hi = theil_sen(x, y)
    ref = stats.theilslopes(y, x, 0.95)
    assert slope == pytest.approx(ref.slope)
    assert lo == pytest.approx(ref.low_slope, abs=0.05) and hi == pytest.approx(ref.high_slope, abs=0.05)


def test_a_plateau_and_a_decelerating_rise_are_not_leaks():
    t = np.arange(0, 600, 1.0)
    plateau = 50e9 + np.minimum(t, 200) * 1e7  # grows for 200 s, then flat for 400
    tr = floor_trend(t, plateau, 600, CFG)
    assert tr.significant and not tr.leak and tr.why_not == "levelled off"
    for decel in (50e9 + 2e9 * np.log1p(t / 20), 50e9 + 2e9 * np.log1p(t / 60)):  # allocator-like: slowing down
        tr = floor_trend(t, decel, 600, CFG)
        assert tr.significant and not tr.leak and tr.why_not in ("decelerating", "levelled off")


@pytest.mark.parametrize("seed", range(5))
def test_damped_rise_lets_a_steady_or_quickening_climb_go_on(seed):
    """A leak keeps its pace (a ramp with noise, or steps in 64 MiB granules): not slowing at the trend's
    confidence, so its forecast keeps going (inf). A climb that quickens is no slowing either."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 120, 32)
    ramp = 40e9 + 20e6 * x + rng.normal(0, 30e6, 32)
    steps = 40e9 + (20e6 * x + rng.uniform(0, 64 << 20, 32)) // (64 << 20) * (64 << 20)
    quickening = 40e9 + 1e5 * x**2 * 20
    for y in (ramp, steps, quickening):
        assert damped_rise(x, y, CFG.trend_ci_z) == float("inf")


def test_damped_rise_stops_a_load_near_its_peak_no_lower_than_it_does():
    """A raised cosine's rising half, read over the two minutes before now: from 70 s before its peak it is
    slowing at the trend's confidence, and the geometric series of its damped pace is a cautious forecast: never
    less than what the load still rises before its peak, and, in its last half minute, less than the window
    rose. At its fastest (100 s before the peak) it is not slowing yet."""
    period, swing = 600.0, 5 * 2**30

    def load(t):
        return swing * (0.5 - 0.5 * np.cos(2 * np.pi * t / period))

    def window(now):
        return np.linspace(now - 120, now, 32)

    assert damped_rise(window(200.0), load(window(200.0)), CFG.trend_ci_z) == float("inf")
    for now in (230.0, 250.0, 270.0, 290.0):
        x = window(now)
        more = damped_rise(x, load(x), CFG.trend_ci_z)
        assert load(period / 2) - load(now) <= more < float("inf"), now
        if now >= 270.0:
            assert more < load(now) - load(x[0]), now


def test_noise_without_trend_is_not_significant():
    rng = np.random.default_rng(7)
    t = np.arange(0, 3600, 1.0)
    y = 60e9 + rng.integers(0, 64, len(t)) * (2 << 20)  # 2 MiB granules of noise
    assert not floor_trend(t, y, 3600, CFG).significant


def test_block_minima_judge_a_sawtooth_by_its_troughs():
    t = np.arange(0, 600, 0.5)
    saw = 30e9 + (t % 30) * 1e9  # a 30 s cycle, bounded
    assert not floor_trend(t, saw, 600, CFG, min_block_s=30).leak
    rising = saw + (t // 30) * 0.2e9  # troughs up 200 MB a cycle
    tr = floor_trend(t, rising, 600, CFG, min_block_s=30)
    assert tr.leak and tr.slope == pytest.approx(0.2e9 / 30, rel=0.1)


def _record_times(rng, draws):
    """Times (one draw a second) at which i.i.d. draws set a new maximum: a caching allocator's high-water steps
    under a stationary load."""
    x = rng.random(draws)
    return np.flatnonzero(x >= np.maximum.accumulate(x)).astype(float)


@pytest.mark.parametrize("window", (600.0, 3600.0, 21600.0))
def test_steady_steps_p_is_calibrated_on_the_records_of_a_stationary_load(window):
    """Over 300 loads, each judged 24 h in, the test rejects records at about its alpha, not more."""
    rng = np.random.default_rng(11)
    ps = [steady_steps_p(_record_times(rng, 86_400), 0.0, 86_400.0, window) for _ in range(300)]
    assert np.mean(np.asarray(ps) < 0.05) <= 0.05 + 0.04  # binomial slack for 300 draws
    assert min(ps) > 0.001 / 300  # and no load anywhere near the strict alpha the analysis uses, Bonferroni'd


def test_steady_steps_p_rejects_a_leak_that_keeps_stepping():
    """An hour of serving whose cache stepped at growing gaps, then a step every 60 s (a leak of kept tensors):
    after 10 minutes of it the steps are no records; before it, nothing to say."""
    records = [20.0, 95.0, 400.0, 1700.0]
    leak = [3600.0 + 60.0 * k for k in range(1, 11)]
    assert steady_steps_p(records, 0.0, 3600.0, 600.0) == 1.0
    assert steady_steps_p(records + leak, 0.0, 4200.0, 600.0) < 1e-6
    assert steady_steps_p(records + leak, 0.0, 4200.0, 3600.0) < 1e-4
    assert steady_steps_p([], 0.0, 4200.0, 600.0) == 1.0 and steady_steps_p(records, 5000.0, 6000.0, 600.0) == 1.0
