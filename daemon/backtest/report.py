"""What a backtest prints: one line per card and a totals line, as JSON Lines (DESIGN.md's
`oomwatch backtest --json` contract) or as text for people.

The text says what the numbers mean for the decision at hand: how often this would have paged (pages per
card-day), and whether it paged ahead of the OOMs the fleet actually had.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

from .card import LEAK_ALERT, PAGE_ALERT, CardResult


@dataclass
class Totals:
    cards: int = 0
    cards_failed: int = 0
    card_days: float = 0.0
    samples: int = 0
    pages: int = 0
    leak_warnings: int = 0
    suspected_ooms: int = 0
    suspected_ooms_paged: int = 0
    leads_s: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, r: CardResult) -> None:
        self.cards += 1
        self.cards_failed += r.error is not None
        self.card_days += r.days
        self.samples += r.samples
        self.pages += r.count(PAGE_ALERT)
        self.leak_warnings += r.count(LEAK_ALERT)
        self.suspected_ooms += len(r.ooms)
        for o in r.ooms:
            if o.paged_ahead_s is not None:
                self.suspected_ooms_paged += 1
                self.leads_s.append(o.paged_ahead_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "cards": self.cards,
            "cards_failed": self.cards_failed,
            "card_days": round(self.card_days, 6),
            "samples": self.samples,
            "pages": self.pages,
            "pages_per_card_day": round(self.pages / self.card_days, 4) if self.card_days else None,
            "leak_warnings": self.leak_warnings,
            "suspected_ooms": self.suspected_ooms,
            "suspected_ooms_paged": self.suspected_ooms_paged,
            "lead_s_median": round(statistics.median(self.leads_s), 1) if self.leads_s else None,
            "seconds": round(self.seconds, 3),
            "samples_per_second": round(self.samples / self.seconds, 1) if self.seconds else None,
        }


def json_card(r: CardResult, out: TextIO) -> None:
    out.write(json.dumps(r.to_json()) + "\n")
    out.flush()


def json_totals(t: Totals, out: TextIO) -> None:
    out.write(json.dumps({"totals": t.to_json()}) + "\n")


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _dur(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def text_card(r: CardResult, out: TextIO) -> None:
    c = r.card
    name = f"{c.node or '?'} gpu {c.gpu}"
    extra = ", ".join(x for x in (c.uuid, c.model, _pod(c.pod), c.source.name) if x)
    out.write(f"{name} ({extra})\n")
    if r.error is not None:
        out.write(f"  FAILED: {r.error}\n")
        out.flush()
        return
    out.write(
        f"  {r.days:.2f} days, {r.samples} samples at {r.step_s:g} s; {r.count(PAGE_ALERT)} page(s), "
        f"{r.count(LEAK_ALERT)} leak warning(s), {len(r.ooms)} suspected OOM(s)\n"
    )
    for a in r.alerts:
        if a["state"] == "firing" and a["alert"] in (PAGE_ALERT, LEAK_ALERT):
            out.write(f"  {_when(a['t'])}  {a['alert']}: {a['summary']}\n")
    for o in r.ooms:
        paged = f"paged {_dur(o.paged_ahead_s)} ahead" if o.paged_ahead_s is not None else "NOT paged"
        crash = {True: "; the container restarted", False: "; no container restart", None: ""}[o.restarted]
        out.write(f"  {_when(o.t)}  suspected OOM: {o.peak_used_ratio:.1%} used, then emptied; {paged}{crash}\n")
    out.write(f"  now: {r.verdict}\n")
    if r.chart is not None:
        out.write(f"  chart: {r.chart}\n")
    elif r.chart_error is not None:
        out.write(f"  chart not written: {r.chart_error}\n")
    out.flush()


def text_totals(t: Totals, out: TextIO, step_s: float) -> None:
    j = t.to_json()
    out.write(
        f"\n{t.cards} card(s), {t.card_days:.2f} card-days, {t.samples} samples at {step_s:g} s"
        + (f" ({t.cards_failed} failed)" if t.cards_failed else "")
        + "\n"
    )
    ppd = j["pages_per_card_day"]
    out.write(
        f"pages: {t.pages} ({'n/a' if ppd is None else f'{ppd:.3f}'} per card-day); leak warnings: {t.leak_warnings}\n"
    )
    lead = j["lead_s_median"]
    out.write(
        f"suspected OOMs: {t.suspected_ooms}, paged ahead: {t.suspected_ooms_paged}"
        + (f" (median lead {_dur(lead)})" if lead is not None else "")
        + "\n"
    )
    out.write(f"{coarse_note(step_s)}\n")
    sps = j["samples_per_second"]
    out.write(f"analysed in {t.seconds:.1f} s ({'n/a' if sps is None else f'{sps:,.0f}'} samples/s)\n")


def coarse_note(step_s: float) -> str:
    """What a step this coarse cannot show (said on every text report, so nobody reads more into it)."""
    return (
        f"steps of {step_s:g} s cannot show transients shorter than about {2 * step_s:g} s (prefill and "
        "sampler spikes, an allocation that fails before the exporter sees it): spike risk is not judged "
        "from them, and growth is seen only once it outlasts several steps"
    )


def _pod(pod: dict[str, str] | None) -> str:
    if not pod:
        return ""
    return "pod " + "/".join(pod[k] for k in ("namespace", "pod") if pod.get(k))
