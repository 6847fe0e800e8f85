"""Recorded traces as a fleet's Prometheus would hold them: dcgm-exporter series in OpenMetrics text, made
into real TSDB blocks by `promtool tsdb create-blocks-from openmetrics`, served by a real Prometheus.

The tests, `bench/backtest.py` and anyone trying fleet mode without a fleet share this, so the backtest is
always exercised against Prometheus itself (its lookback, its step alignment, its points limit), never a
mock of it. Needs the `prometheus` and `promtool` binaries (Debian: `apt-get install prometheus`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

from ..errors import OomwatchError
from ..model import GpuInfo
from ..trace import parse_header, read_trace
from .series import SOURCES, SourceKind, label_matchers

DCGM = next(s for s in SOURCES if s.name == "dcgm-exporter")
#: (unix s, used, free, reserved) in bytes: one point of a card's curve.
Point = tuple[float, int, int | None, int | None]
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SeriesSpec:
    """One card to write: its labels and a function giving its points afresh (each family reads them once:
    OpenMetrics wants a family's samples together, and a month of a card is not kept in memory)."""

    labels: dict[str, str]
    points: Callable[[], Iterable[Point]]


def dcgm_labels(node: str, gpu: int, uuid: str, model: str, pod: dict[str, str] | None = None) -> dict[str, str]:
    """The labels dcgm-exporter puts on a card's series (with the pod using it when Kubernetes mapping is on)."""
    labels = {"gpu": str(gpu), "UUID": uuid, "device": f"nvidia{gpu}", "modelName": model, "Hostname": node}
    labels.update({"instance": f"{node}:9400", "job": "dcgm-exporter"})
    labels.update(pod or {})
    return labels


def trace_gpus(path: str) -> tuple[GpuInfo, ...]:
    """The cards a trace's header lists (read without opening its records)."""
    with open(path, encoding="utf-8") as f:
        return parse_header(f.readline(), path).gpus


def trace_points(path: str, gpu: int, base_unix: float) -> Iterator[Point]:
    """One card of a gpu-memory-trace/1 file as points, its `t` moved to start at `base_unix`."""
    _header, records = read_trace(path, warn=False)
    for t, rec in records:
        for g in getattr(rec, "gpus", ()):
            if g.index == gpu and g.used_bytes is not None:
                yield base_unix + t, g.used_bytes, g.free_bytes, g.reserved_bytes


def exporter_labels(source: SourceKind, node: str, gpu: int, uuid: str, model: str) -> dict[str, str]:
    """The labels nvidia_gpu_exporter or oomwatch put on a card's memory series (dcgm: `dcgm_labels`)."""
    if source.name == "nvidia_gpu_exporter":
        return {"uuid": uuid, "name": model, "instance": f"{node}:9835", "job": "nvidia_gpu_exporter"}
    if source.name == "oomwatch":
        return {
            "gpu": str(gpu),
            "uuid": uuid,
            "name": model,
            "node": node,
            "instance": f"{node}:9846",
            "job": "oomwatch",
        }
    return dcgm_labels(node, gpu, uuid, model)


def write_dcgm(
    out: TextIO,
    cards: Iterable[SeriesSpec],
    extra: Iterable[tuple[str, dict[str, str], Iterable[tuple[float, float]]]] = (),
) -> int:
    """`write_series` as dcgm-exporter: FB_USED/FB_FREE/FB_RESERVED in whole MiB, as it exports them."""
    return write_series(out, cards, DCGM, extra)


def write_series(
    out: TextIO,
    cards: Iterable[SeriesSpec],
    source: SourceKind,
    extra: Iterable[tuple[str, dict[str, str], Iterable[tuple[float, float]]]] = (),
) -> int:
    """Write `cards` as `source`'s memory metrics (each in its unit; a total is used + free + reserved), then
    `extra` gauges (name, labels, (t, value) points), then `# EOF`. Returns the number of samples."""
    cards = list(cards)
    n = 0
    for role, name in source.metrics.items():
        out.write(f"# TYPE {name} gauge\n")
        for c in cards:
            sel = label_matchers(c.labels)
            for p in c.points():
                v = _role_value(role, p)
                if v is not None:
                    out.write(f"{name}{sel} {round(v / source.scale_bytes)} {p[0]:.3f}\n")
                    n += 1
    by_name: dict[str, list[tuple[dict[str, str], Iterable[tuple[float, float]]]]] = {}
    for name, labels, pts in extra:
        by_name.setdefault(name, []).append((labels, pts))
    for name, group in by_name.items():
        out.write(f"# TYPE {name} gauge\n")
        for labels, pts in group:
            sel = label_matchers(labels)
            for t, x in pts:
                out.write(f"{name}{sel} {x:g} {t:.3f}\n")
                n += 1
    out.write("# EOF\n")
    return n


def _role_value(role: str, p: Point) -> int | None:
    _t, used, free, reserved = p
    if role == "total":
        return None if free is None else used + free + (reserved or 0)
    return {"used": used, "free": free, "reserved": reserved}[role]


def create_blocks(openmetrics: str, tsdb_dir: str) -> None:
    """`promtool tsdb create-blocks-from openmetrics` into `tsdb_dir` (a one-line error if it fails)."""
    promtool = _binary("promtool")
    os.makedirs(tsdb_dir, exist_ok=True)
    r = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", openmetrics, tsdb_dir],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise OomwatchError(f"promtool could not import {openmetrics}: {' '.join(r.stderr.split())[:300]}")


def _binary(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        raise OomwatchError(f"{name} is not installed (Debian: apt-get install prometheus)")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PromServer:
    """A real Prometheus serving `tsdb_dir` on 127.0.0.1 (a free port), scraping nothing; a context
    manager that stops it. Retention is unlimited in practice so old imported blocks are kept. `args`: more
    of Prometheus' flags (its query limits, to see them refuse a read)."""

    def __init__(self, tsdb_dir: str, port: int | None = None, args: tuple[str, ...] = ()):
        self.tsdb_dir = tsdb_dir
        self.args = args
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PromServer:
        cfg = os.path.join(self.tsdb_dir, "prometheus.yml")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        self.proc = subprocess.Popen(
            [
                _binary("prometheus"),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.tsdb_dir}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except urllib.error.HTTPError as e:
                e.close()
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise OomwatchError(f"Prometheus on {self.tsdb_dir} did not become ready")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> PromServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
