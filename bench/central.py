"""Central-mode cost: what one read of the fleet costs per card, and what a card costs in memory.

    python bench/central.py [--cards 64] [--hours 2] [--step 15] [--json OUT]

`oomwatch run --prometheus URL` keeps one `CardWatch` per card (its own `Analyzer`) and, at every read, feeds
each card its new scrape and refreshes its snapshot. This runs exactly that loop in-process over the backtest
benchmark's fleet curves (bench/backtest.py: healthy servers, slow leaks to an OOM, bounded sawtooths), with
no Prometheus in the way (its query cost is the backtest benchmark's), and times, per read:
- `feed`: one new point into each card's analysis (what the central adds per card per scrape);
- `refresh`: each card's snapshot (its exposition and status page);
side by side with the same points fed to a bare `Analyzer`, as `oomwatch replay` feeds a trace, so the ratio
says what the central's own wiring costs on top of the analysis. Memory: RSS before the cards exist and
after the run, divided by the cards.

Figures are medians over the reads (the machines are noisy); the run interleaves the two sides read by read.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.backtest import BASE, TOTAL, cards, curve  # noqa: E402
from oomwatch.analysis.analyzer import Analyzer  # noqa: E402
from oomwatch.backtest.card import card_gpus, sample_record  # noqa: E402
from oomwatch.backtest.series import cards_from_series  # noqa: E402
from oomwatch.central.watch import CardWatch  # noqa: E402
from oomwatch.config import DaemonConfig  # noqa: E402
from oomwatch.feed import feed  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fleet(n: int):
    """The config and (Card, kind, seed) for n cards of the backtest benchmark's fleet, as dcgm-exporter's."""
    cfg = DaemonConfig()
    out = []
    for node, gpu, uuid, kind, seed in cards(n):
        labels = {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": str(gpu), "UUID": uuid, "Hostname": node}
        (card,) = cards_from_series([labels])
        out.append((card, kind, seed))
    return cfg, out


def run(n: int, hours: float, step: float) -> dict:
    cfg, specs = fleet(n)
    rss0 = rss_mib()
    watches, bare, curves = [], [], []
    for card, kind, seed in specs:
        watches.append(CardWatch(card, TOTAL, cfg, BASE, step))
        bare.append(Analyzer(card_gpus(card, TOTAL, step), cfg.analysis, cfg.alerts))
        curves.append(curve(kind, seed, hours / 24, step))
    feed_ms, refresh_ms, bare_ms = [], [], []
    reads = int(hours * 3600 / step)
    for _ in range(reads):
        points = [next(c) for c in curves]
        t0 = time.perf_counter()
        for w, p in zip(watches, points, strict=True):
            w.feed([p])
        t1 = time.perf_counter()
        for w in watches:
            w.refresh()
        t2 = time.perf_counter()
        for a, w, (t, u, f, r) in zip(bare, watches, points, strict=True):
            feed(a, [sample_record(w.index, t - BASE, u, f, r)])
        t3 = time.perf_counter()
        feed_ms.append((t1 - t0) * 1e3 / n)
        refresh_ms.append((t2 - t1) * 1e3 / n)
        bare_ms.append((t3 - t2) * 1e3 / n)
    rss1 = rss_mib()
    med = statistics.median
    read = med(f + r for f, r in zip(feed_ms, refresh_ms, strict=True))  # ms per card per read
    return {
        "cards": n,
        "hours": hours,
        "step_s": step,
        "reads": reads,
        "feed_ms_per_card_median": round(med(feed_ms), 4),
        "refresh_ms_per_card_median": round(med(refresh_ms), 4),
        "replay_feed_ms_per_card_median": round(med(bare_ms), 4),
        "feed_over_replay": round(med(feed_ms) / med(bare_ms), 3),
        "read_ms_median": round(read * n, 2),
        "read_share_of_step": round(read * n / (step * 1e3), 5),
        "rss_mib_before_cards": round(rss0, 1),
        "rss_mib_after": round(rss1, 1),
        # two analyses per card grew here side by side, the central's and the bare one: half the growth each
        "mib_per_card": round((rss1 - rss0) / n / 2, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=64, help="cards in the fleet (default 64)")
    ap.add_argument("--hours", type=float, default=2.0, help="hours of scrapes fed (default 2)")
    ap.add_argument("--step", type=float, default=15.0, help="scrape interval in seconds (default 15)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures here")
    a = ap.parse_args(argv)
    if a.cards < 1 or a.hours <= 0 or a.step <= 0:
        ap.error("--cards, --hours and --step must be above 0")
    t0 = time.perf_counter()
    r = run(a.cards, a.hours, a.step)
    r.update(
        command=f"python bench/central.py --cards {a.cards} --hours {a.hours:g} --step {a.step:g}",
        wall_s=round(time.perf_counter() - t0, 1),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    )
    print(json.dumps(r, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
