"""GPUOOMImminent means what its name says: it holds only while a forecast puts the card's fill inside the
horizon. Checked as a property over the corpus (the CI subset of the project's generator, every real
recording, the second generator): at every evaluation where the page is firing for a card, an evaluation no
longer than the alert's clear time ago had a GPUOOMImminent condition for that card whose ETA was within
the forecast's hysteresis (`oom_bound_factor` horizons) - never a page with an ETA of hours or days.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import detection as D  # noqa: E402, N812
from bench.scenarios import FAST  # noqa: E402
from oomwatch.analysis.analyzer import Analyzer  # noqa: E402
from oomwatch.config import AlertTiming, AnalysisConfig  # noqa: E402
from oomwatch.model import Sample  # noqa: E402
from oomwatch.trace import parse_header, parse_line  # noqa: E402

PAGE = "GPUOOMImminent"
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def _items() -> list[str]:
    reals = sorted(glob.glob(os.path.join(SHARED, "traces", "*.jsonl")))
    reals += sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.jsonl")))
    return list(FAST) + reals


def check_pages_hold_their_forecast(item: str) -> tuple[int, list[str]]:
    """(evaluations with a page firing, violations) of one trace."""
    cfg, timing = AnalysisConfig(), AlertTiming()
    clear = timing.clear_by_alert.get(PAGE, timing.clear_s) + cfg.eval_interval_s
    bound = cfg.oom_bound_factor * cfg.oom_horizon_s + cfg.oom_for_max_s
    header, recs, _ = D.load(item)
    an = Analyzer(parse_header(json.dumps(header), item).gpus)
    last_ok: dict[str, float] = {}
    paged, bad = 0, []
    for rec in (parse_line(o) for o in recs):
        if rec is None:
            continue
        if not isinstance(rec, Sample):
            from oomwatch.feed import feed

            feed(an, [rec])
            continue
        before = an.now
        an.add_sample(rec)
        if an.now == before or not an.book.alerts:
            continue
        now = float(an.now)
        for f in an.findings:
            if f.kind == "oom_imminent" and f.gpu is not None:
                eta = (f.evidence or {}).get("eta_seconds")
                if eta is not None and eta <= bound:
                    last_ok[f.gpu] = now
        for a in an.book.firing():
            if a.alertname != PAGE:
                continue
            gpu = dict(a.labels).get("gpu", "")
            paged += 1
            if now - last_ok.get(gpu, -1e18) > clear:
                bad.append(f"t={now:.0f} s GPU {gpu}: paging without a forecast inside {bound:.0f} s")
    return paged, bad


@pytest.mark.parametrize("item", _items(), ids=lambda p: os.path.basename(p)[:-6] if p.endswith(".jsonl") else p)
def test_a_page_holds_only_while_its_forecast_does(item):
    _, bad = check_pages_hold_their_forecast(item)
    assert not bad, "; ".join(bad[:5])
