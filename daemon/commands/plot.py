"""`--plot FILE.png` of `replay` and `diagnose`: checked up front, fed every sample, drawn at the end."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..errors import UsageError, one_line, show
from ..model import ProcInfo, RssSample, Sample, SourceStatus

if TYPE_CHECKING:
    from oomwatch.exporters.plot import Recorder

    from ..analysis.analyzer import Analyzer

__all__ = ["PlotTap", "draw", "plot_folder", "plot_recorder"]


def plot_recorder(args: argparse.Namespace) -> Recorder | None:
    """Check --plot up front (matplotlib present, file writable) so a long run does not fail at its end."""
    if getattr(args, "plot", None) is None:
        return None
    from oomwatch.exporters.plot import Recorder

    _need_matplotlib()
    d = os.path.dirname(os.path.abspath(args.plot)) if args.plot else ""
    if not args.plot or os.path.isdir(args.plot) or not os.path.isdir(d) or not os.access(d, os.W_OK):
        raise UsageError(f"cannot write {show(args.plot)}: not a file name in a writable folder")
    from matplotlib.backend_bases import FigureCanvasBase

    ext = os.path.splitext(args.plot)[1][1:].lower()
    kinds = FigureCanvasBase.get_supported_filetypes()
    if ext and ext not in kinds:
        raise UsageError(
            f"cannot draw {show(args.plot)}: not an image type matplotlib writes ({', '.join(sorted(kinds))})"
        )
    return Recorder()


def plot_folder(path: str) -> str:
    """Check a folder of charts up front (matplotlib present; the folder made if missing, and writable), so a
    long backtest does not fail at its first page. Returns it as an absolute path (workers may run elsewhere)."""
    _need_matplotlib()
    d = os.path.abspath(path) if path else ""
    try:
        if not d:
            raise OSError("no folder named")
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--plot: cannot make the folder {show(path)}: {one_line(str(e))}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"--plot: cannot write into the folder {show(path)}")
    return d


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'oomwatch[plot]'") from None


def draw(args: argparse.Namespace, a: Analyzer, rec_plot: Recorder | None) -> None:
    if rec_plot is None:
        return
    from oomwatch.exporters.plot import plot

    try:
        plot(args.plot, a, rec_plot, a.transitions)
    except (OSError, ValueError) as e:  # an unknown image format, a full disk
        raise UsageError(f"cannot write {show(args.plot)}: {one_line(str(e))}") from None
    print(f"chart written to {args.plot}", file=sys.stderr)


class PlotTap:
    """A `SampleTap` for the sampler that hands each sample to the --plot recorder (and is always up)."""

    name = "plot"

    def __init__(self, rec_plot: Recorder) -> None:
        self._rec = rec_plot
        self.status = SourceStatus("plot", True)

    def sample(self, s: Sample) -> None:
        self._rec.add(s)

    def proc(self, t: float, p: ProcInfo) -> None:
        pass

    def rss(self, r: RssSample) -> None:
        pass

    def close(self) -> None:
        pass
