"""One card's memory history at several resolutions, in fixed memory.

Leaks range from GB per second (OOM in a minute) to MB per hour (OOM after days), so one window cannot
judge them all: 15 minutes at full rate sees the fast ones and misses the slow ones entirely. Each level
here is a ring of buckets holding (end time, min, max, last) of the used bytes: 0.25 s buckets for 15
minutes, 1 s for 6 hours, 1 minute for 7 days (`AnalysisConfig.history_levels`). The minimum keeps the
floor (what is held: leaks show there), the maximum keeps the transients (what OOMs first), so coarser
levels lose timing, never the two facts the detectors need.

Cost: a raw sample touches only the finest level's open bucket (a few comparisons); a closed bucket is
folded into the next level's open bucket, so coarser levels cost O(1) amortised. Each ring stores every
bucket twice (at i and i + cap), so the window in time order is always one contiguous slice: reading it
is a view, never a copy. Memory is fixed at start: 2 x 4 float64 per bucket, about 2.3 MB per card with
the default levels (measured in bench/RESULTS.md).
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np


class Ring:
    """Append-only (in time) bucketed series: (t_last, min, max, last) per bucket."""

    __slots__ = ("bucket_s", "cap", "_t", "_min", "_max", "_last", "_n", "_head", "_cur_k", "_cur")

    def __init__(self, bucket_s: float, window_s: float):
        self.bucket_s = bucket_s
        self.cap = max(8, int(math.ceil(window_s / bucket_s)))
        self._t = np.zeros(2 * self.cap + 2)
        self._min = np.zeros(2 * self.cap + 2)
        self._max = np.zeros(2 * self.cap + 2)
        self._last = np.zeros(2 * self.cap + 2)
        self._n = 0  # closed buckets in the ring
        self._head = 0  # next write position
        self._cur_k: int | None = None
        self._cur: list[float] | None = None  # the open bucket: [t_last, min, max, last]

    def add(self, t: float, lo: float, hi: float, last: float) -> list[float] | None:
        """Fold a reading (or a finer bucket) in; returns the bucket it closed, if any."""
        k = int(t // self.bucket_s)
        cur = self._cur
        if cur is not None and k == self._cur_k:
            if lo < cur[1]:
                cur[1] = lo
            if hi > cur[2]:
                cur[2] = hi
            cur[0] = t
            cur[3] = last
            return None
        closed = None
        if cur is not None:
            self._store(cur)
            closed = cur
        self._cur_k = k
        self._cur = [t, lo, hi, last]
        return closed

    def _store(self, cur: list[float]) -> None:
        h = self._head
        c = self.cap
        self._t[h] = self._t[h + c] = cur[0]
        self._min[h] = self._min[h + c] = cur[1]
        self._max[h] = self._max[h + c] = cur[2]
        self._last[h] = self._last[h + c] = cur[3]
        self._head = (h + 1) % c
        if self._n < c:
            self._n += 1

    def arrays(self) -> list[np.ndarray]:
        """(t, min, max, last) in time order, the open bucket included: views, valid until the next add."""
        n, h, cap = self._n, self._head, self.cap
        start = h if n == cap else 0
        end = start + n  # the slot after the window: free (the oldest bucket's twin or unused)
        if self._cur is not None:
            for arr, v in zip((self._t, self._min, self._max, self._last), self._cur, strict=True):
                arr[end] = v
            end += 1
        return [a[start:end] for a in (self._t, self._min, self._max, self._last)]

    def since(self, t0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`arrays()` cut to buckets that end at or after `t0`."""
        t, mn, mx, la = self.arrays()
        i = int(np.searchsorted(t, t0, side="left"))
        return t[i:], mn[i:], mx[i:], la[i:]

    def __len__(self) -> int:
        return self._n + (self._cur is not None)

    @property
    def nbytes(self) -> int:
        return self._t.nbytes + self._min.nbytes + self._max.nbytes + self._last.nbytes

    # ---- persistence (daemon/state.py) --------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        """The closed and open buckets as base64 little-endian float64 (fast to write, exact to read)."""
        t, mn, mx, la = self.arrays()

        def enc(a: np.ndarray) -> str:
            return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode()

        return {"bucket_s": self.bucket_s, "t": enc(t), "min": enc(mn), "max": enc(mx), "last": enc(la)}

    def load(self, d: dict[str, Any]) -> None:
        if float(d["bucket_s"]) != self.bucket_s:
            raise ValueError("bucket size differs")
        cols = [np.frombuffer(base64.b64decode(d[k]), dtype="<f8") for k in ("t", "min", "max", "last")]
        if len({len(c) for c in cols}) != 1 or (len(cols[0]) > 1 and np.any(np.diff(cols[0]) < 0)):
            raise ValueError("columns differ in length or times go backwards")
        self._n = self._head = 0
        self._cur = self._cur_k = None
        for row in zip(*(c[-self.cap :].tolist() for c in cols), strict=True):
            self._store(list(row))

    def shift(self, dt: float) -> None:
        """Move every stored time by `dt` (another clock after a restart)."""
        self._t += dt
        if self._cur is not None:
            self._cur[0] += dt


class History:
    """The levels of one card. `add` costs O(1) amortised; `levels[i]` are the rings, finest first."""

    __slots__ = ("levels", "_fine")

    def __init__(self, levels: tuple[tuple[float, float], ...]):
        self.levels = [Ring(b, w) for b, w in levels]
        self._fine = self.levels[0]

    def add(self, t: float, used: float) -> None:
        fine = self._fine
        cur = fine._cur
        if cur is not None and int(t // fine.bucket_s) == fine._cur_k:  # the common case, inlined
            if used < cur[1]:
                cur[1] = used
            elif used > cur[2]:
                cur[2] = used
            cur[0] = t
            cur[3] = used
            return
        closed = fine.add(t, used, used, used)
        i = 1
        while closed is not None and i < len(self.levels):
            closed = self.levels[i].add(closed[0], closed[1], closed[2], closed[3])
            i += 1

    def arrays(self) -> list[np.ndarray]:
        """The finest level (the last 15 minutes at full resolution)."""
        return self._fine.arrays()

    def pick(self, seconds: float) -> Ring:
        """The finest level that covers `seconds`."""
        for r in self.levels:
            if r.cap * r.bucket_s >= seconds:
                return r
        return self.levels[-1]

    def __len__(self) -> int:
        return len(self._fine)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.levels)

    def dump(self) -> list[dict[str, Any]]:
        return [r.dump() for r in self.levels]

    def load(self, data: list[dict[str, Any]], shift: float = 0.0) -> None:
        if len(data) != len(self.levels):
            raise ValueError("levels differ")
        for r, d in zip(self.levels, data, strict=True):
            r.load(d)
            if shift:
                r.shift(shift)
