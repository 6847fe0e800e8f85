"""`oomwatch replay TRACE`: the whole analysis over a trace as fast as it goes; alert transitions and a
summary (JSON Lines with --json)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from .plot import draw, plot_recorder

if TYPE_CHECKING:
    from ..analysis.alerts import Transition

__all__ = ["main"]


def main(args: argparse.Namespace) -> int:
    from ..feed import replay_trace
    from ..report import render

    out = sys.stdout
    rec_plot = plot_recorder(args)

    def show(tr: Transition) -> None:
        al = tr.alert
        if args.json:
            out.write(
                json.dumps(
                    {
                        "t": round(tr.t, 3),
                        "alert": al.alertname,
                        "state": tr.state,
                        "labels": al.all_labels(),
                        "summary": al.summary,
                        "eta_seconds": None if al.eta_seconds is None else round(al.eta_seconds, 1),
                    }
                )
                + "\n"
            )
        else:
            out.write(f"{tr.t:9.2f}s  {tr.state.upper():8s} {al.alertname:20s} {al.summary}\n")

    res = replay_trace(args.trace, show, rec_plot.add if rec_plot else None)  # TraceError: one line, exit 2
    a, summary = res.analyzer, res.summary
    draw(args, a, rec_plot)
    if args.json:
        out.write(json.dumps({"summary": summary}) + "\n")
    else:
        out.write(f"\n{summary['samples']} samples over {summary['seconds']:.1f} s\n")
        out.write(render(a, summary) + "\n")
    return 0
