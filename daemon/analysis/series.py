"""Per-card memory history folded into fixed buckets (min, max, last), kept in a numpy ring.

Raw NVML samples arrive at 10-20 Hz; the detectors need the floor (what is kept) and the peaks (what
OOMs), not every sample. Folding into buckets costs a few comparisons per sample, and the ring holds the
analysis window (15 minutes by default) in fixed memory, so the daemon cannot grow with uptime.
"""

from __future__ import annotations

import math

import numpy as np


class BucketSeries:
    """Append-only (in time) bucketed series of one card's used bytes."""

    __slots__ = ("bucket_s", "cap", "_t", "_min", "_max", "_last", "_n", "_head", "_cur_k", "_cur")

    def __init__(self, bucket_s: float, window_s: float):
        self.bucket_s = bucket_s
        self.cap = max(8, int(math.ceil(window_s / bucket_s)))
        # Each bucket is written twice (at i and i + cap), so the window in time order is always one
        # contiguous slice: reading it costs no copy. One spare slot holds the open bucket.
        self._t = np.zeros(2 * self.cap + 2)
        self._min = np.zeros(2 * self.cap + 2)
        self._max = np.zeros(2 * self.cap + 2)
        self._last = np.zeros(2 * self.cap + 2)
        self._n = 0  # filled buckets in the ring
        self._head = 0  # next write position
        self._cur_k: int | None = None
        self._cur: list[float] | None = None  # [t_last, min, max, last]

    def add(self, t: float, used: float) -> None:
        k = int(t // self.bucket_s)
        cur = self._cur
        if cur is not None and k == self._cur_k:
            if used < cur[1]:
                cur[1] = used
            if used > cur[2]:
                cur[2] = used
            cur[0] = t
            cur[3] = used
            return
        if cur is not None:
            self._flush()
        self._cur_k = k
        self._cur = [t, used, used, used]

    def _flush(self) -> None:
        cur = self._cur
        h = self._head
        for arr, v in zip((self._t, self._min, self._max, self._last), cur):
            arr[h] = v
            arr[h + self.cap] = v
        self._head = (h + 1) % self.cap
        self._n = min(self._n + 1, self.cap)

    def arrays(self):
        """(t, min, max, last) in time order, the open bucket included: views, valid until the next add."""
        n, h, cap = self._n, self._head, self.cap
        start = h if n == cap else 0
        end = start + n  # the slot after the window: free (it is the oldest bucket's twin or unused)
        if self._cur is not None:
            for arr, v in zip((self._t, self._min, self._max, self._last), self._cur):
                arr[end] = v
            end += 1
        return [a[start:end] for a in (self._t, self._min, self._max, self._last)]

    def __len__(self) -> int:
        return self._n + (self._cur is not None)
