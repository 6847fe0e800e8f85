"""GPUOOMImminent means what its name says: it holds only while a forecast puts the card's fill inside the
horizon. Checked as a property over the corpus (the CI subset of the project's generator, every real
recording, the second generator): at every evaluation where the page is firing for a card, an evaluation no
longer than the alert's clear time ago had a GPUOOMImminent condition for that card whose ETA was within
the forecast's hysteresis (`oom_bound_factor` horizons) - never a page with an ETA of hours or days.

And a card whose processes are gone raises nothing about its memory: no card alert fires while the card is
idle or exiting (a dead server's probe file, or its last curve, must not page or warn after its OOM).
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
from oomwatch.config import CARD_ALERTS, AlertTiming, AnalysisConfig  # noqa: E402
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


def check_no_alert_on_a_card_without_processes(item: str) -> list[str]:
    """Card alerts that fired while their card was idle or exiting (its processes gone)."""
    header, recs, _ = D.load(item)
    an = Analyzer(parse_header(json.dumps(header), item).gpus)
    bad: list[str] = []
    seen: list = []
    from oomwatch.feed import feed

    for rec in (parse_line(o) for o in recs):
        if rec is None:
            continue
        seen.clear()
        feed(an, [rec], on_transition=seen.append)
        for tr in seen:
            gpu = dict(tr.alert.labels).get("gpu")
            if tr.state != "firing" or tr.alert.alertname not in CARD_ALERTS or gpu is None or not gpu.isdigit():
                continue
            phase = an.gpus[int(gpu)].lc.phase
            if phase in ("idle", "exiting"):
                bad.append(f"t={tr.t:.0f} s {tr.alert.alertname} fired on GPU {gpu}, {phase}")
    return bad


@pytest.mark.parametrize("item", _items(), ids=lambda p: os.path.basename(p)[:-6] if p.endswith(".jsonl") else p)
def test_no_card_alert_fires_once_its_processes_are_gone(item):
    bad = check_no_alert_on_a_card_without_processes(item)
    assert not bad, "; ".join(bad[:5])
