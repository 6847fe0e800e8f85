"""Paging latency: from the sample that crosses the line to the webhook, oomwatch's push vs Prometheus.

    python bench/alert_latency.py [--runs 3] [--scrape 15]

Each run replays the real staircase trace at 1x through a real `oomwatch run` that pushes to a real
Alertmanager, while a real Prometheus scrapes the same daemon every --scrape seconds with rules/ loaded and
sends to the same Alertmanager. The crossing moment is the startsAt oomwatch gives GPUOOMImminent (the wall
time of the evaluation whose sample crossed the line); both arrivals at the webhook are measured from it.
"""

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from servers import Alertmanager, Prometheus, Webhook, start_oomwatch  # noqa: E402


def wall(s):
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def one(scrape):
    tmp = tempfile.mkdtemp()
    hook = Webhook()
    am = Alertmanager(tmp, hook.url)
    with open(am.cfg, "w") as f:  # group by every label: the two paths' alerts arrive separately
        f.write(
            "route:\n  receiver: hook\n  group_by: ['...']\n  group_wait: 0s\n  group_interval: 1s\n"
            f"  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: {hook.url}\n"
        )
    am.start()
    p, target = start_oomwatch(
        "--replay", os.path.join(ROOT, "daemon", "examples", "staircase.jsonl"), "--alertmanager-url", am.url
    )
    prom = Prometheus(
        tmp,
        target,
        [os.path.join(ROOT, "rules", "oomwatch.rules.yml")],
        scrape_interval=f"{scrape:g}s",
        alertmanager=am.url.replace("http://", ""),
    )
    try:
        deadline = time.time() + 120
        push = prom_path = starts = None
        while time.time() < deadline and (push is None or prom_path is None):
            for t_recv, al in hook.alerts("GPUOOMImminent", "firing"):
                if "/graph" in al.get("generatorURL", ""):
                    prom_path = prom_path or t_recv
                elif push is None:
                    push, starts = t_recv, wall(al["startsAt"])
            time.sleep(0.05)
        return {"push_s": round(push - starts, 3), "prometheus_s": round(prom_path - starts, 3)}
    finally:
        prom.stop()
        p.terminate()
        p.wait(10)
        am.stop()
        hook.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scrape", type=float, default=15)
    a = ap.parse_args()
    rows = [one(a.scrape) for _ in range(a.runs)]
    push = statistics.median(r["push_s"] for r in rows)
    prom = statistics.median(r["prometheus_s"] for r in rows)
    print(
        json.dumps(
            {
                "runs": rows,
                "scrape_interval_s": a.scrape,
                "push_median_s": push,
                "prometheus_median_s": prom,
                "ratio_prometheus_over_push": round(prom / push, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
