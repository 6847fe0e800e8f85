"""Where each card is in its server's life: idle, starting, serving, exiting.

Growth means different things in each. An inference server's start climbs in steps exactly like a leak
(weight shards, a profile spike, the KV pool in one jump, CUDA graphs), so growth during a start is never
a leak; growth while serving is judged by the trend (trend.py); memory that a dying process gives back is
neither a release of a cycle nor a spike.

- A start begins when a process appears on the card that was not there (a restart beside an orphan is a
  start too), or when the card leaves idle.
- It ends when the engine first answers (engine-aware), or when the card has held steady for `settle_s`
  after its last large rise (`settle_fraction` of the card) and, for an engine that preallocates a KV pool
  (a budget), after that pool's jump (weights from network storage pause longer than any settle time),
  or when the card starts to cycle (a second release: it is serving a load); at the latest after
  `start_max_s`.
- A command line naming vLLM, SGLang, TGI or llama.cpp means a start pattern is expected: its budget
  (`--gpu-memory-utilization`, `--mem-fraction-static`, or the engine's default) is where its start stops,
  and that is what keeps small cards quiet: on a 24 GB card a 7B model's weights fill 60% of the card in
  seconds, a climb no curve can tell from a leak to OOM, but it stays under the line the server itself
  declares. Above that line (plus the graphs' few percent), urgency decides (see curve.py).
- All of the card's PIDs gone while memory is still held: exiting; then idle once it is released.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

SERVER_PATTERNS = (
    ("vllm", re.compile(r"\bvllm\b")),
    ("sglang", re.compile(r"\bsglang\b")),
    ("tgi", re.compile(r"text-generation-(launcher|server)")),
    ("llamacpp", re.compile(r"llama-server|llama\.cpp|llama_cpp")),
    ("triton", re.compile(r"tritonserver|trtllm-serve")),  # Triton, TensorRT-LLM: pools sized from free memory
    # any other model server: a model flag (Hugging Face style, TGI v1), an ASGI/WSGI app server, a notebook kernel
    ("server", re.compile(r"--model(-path|-id)?[= ]|\b(uvicorn|gunicorn|hypercorn|ipykernel_launcher)\b")),
)
#: Budget flags and each engine's default budget fraction (vLLM 0.9; SGLang's mem_fraction_static is
#: about 0.88 on large cards; TGI and llama.cpp preallocate up to the card, so none).
BUDGET_FLAGS = re.compile(r"--(gpu-memory-utilization|mem-fraction-static|cuda-memory-fraction)[= ]([0-9.]+)")
DEFAULT_BUDGET = {"vllm": 0.9, "sglang": 0.88}


def server_kind(cmdline: tuple[str, ...] | None, name: str = "") -> tuple[str | None, float | None]:
    """(engine kind, budget fraction) from a process name and command line; (None, None) for anything else."""
    if not cmdline and not name:
        return None, None
    s = (name + " " + " ".join(cmdline or ())).lower()
    for kind, pat in SERVER_PATTERNS:
        if pat.search(s):
            m = BUDGET_FLAGS.search(s)
            try:
                budget = float(m.group(2)) if m else DEFAULT_BUDGET.get(kind)
            except ValueError:
                budget = DEFAULT_BUDGET.get(kind)
            return kind, budget
    return None, None


class Lifecycle:
    """One card's phase, updated at each evaluation with O(1) work."""

    __slots__ = (
        "phase",
        "start_t",
        "serving_since",
        "loaded_at",
        "idle_since",
        "exit_t",
        "pids",
        "kind",
        "budget",
        "level",
        "last_rise_t",
        "regime_t",
        "regime_level",
        "releases",
        "ever_busy",
        "tallest",
        "starts",
        "end_reason",
        "release_times",
        "falling",
        "max_jump",
        "hw_level",
        "hw_times",
        "prev_lo",
    )

    def __init__(self) -> None:
        self.phase = "idle"
        self.start_t: float | None = None
        self.serving_since: float | None = None
        # when the start's own allocations ended: its last rise where it ended by holding steady (the
        # steady stretch is already serving), else when it ended
        self.loaded_at: float | None = None
        self.idle_since: float | None = None
        self.exit_t: float | None = None  # last time one of the card's processes went away
        self.pids: frozenset[int] = frozenset()
        self.kind: str | None = None
        self.budget: float | None = None
        self.level = 0.0  # the floor level the settle rule compares against
        self.last_rise_t = 0.0
        self.regime_t: float | None = None  # after the last dominant jump (the KV pool)
        self.regime_level = 0.0
        self.releases = 0
        self.ever_busy = False
        self.tallest = 0.0  # tallest transient given back since this server started (profile run included)
        self.starts = 0
        self.end_reason = ""  # why the start ended
        # when the card began to give memory back (sudden or gradual)
        self.release_times: deque[float] = deque(maxlen=16)
        self.falling = False
        self.max_jump = 0.0  # the largest single rise of this start so far
        self.hw_level = 0.0  # high-water floor while serving, and when it stepped up
        self.hw_times: deque[float] = deque(maxlen=64)
        self.prev_lo = 0.0  # the last evaluation's least reading (levels move on what two evaluations hold)

    def update(
        self,
        now: float,
        lo: float,
        used: float,
        pids: frozenset[int],
        procs: dict[int, Any],
        engine_up_since: float | None,
        cap: float,
        cfg: Any,
    ) -> str:
        """Fold one evaluation in. `lo`: least used bytes since the last one."""
        # While serving, levels move on the least reading of this evaluation and the last: an activation
        # transient is held for 0.1-2 s (one forward pass), so it lifts one evaluation, not two; a kept
        # allocation, a cycle's climb and a release last longer. (A start's shards are levels at once.)
        lo, self.prev_lo = (min(lo, self.prev_lo) if self.phase == "serving" else lo), lo
        idle_bytes = cfg.idle_fraction * cap
        busy = bool(pids) or used >= idle_bytes
        if not busy:
            if self.phase != "idle":
                self.phase = "idle"
                self.idle_since = now
                if self.pids:
                    self.exit_t = now
            self.pids = pids
            return self.phase
        gone = self.pids - pids
        new = pids - self.pids
        if gone:
            self.exit_t = now
        if (new and (self.phase != "exiting" or not gone)) or self.phase == "idle":
            self._start(now, lo, new or pids, procs)
        self.pids = pids
        self.ever_busy = True
        if not pids and self.phase in ("serving", "starting") and self.start_t is not None and self.exit_t:
            self.phase = "exiting"
            return self.phase
        if self.phase == "exiting" and pids:
            self.phase = "serving"
        step = max(cfg.settle_fraction * cap, float(cfg.settle_min_bytes))
        if lo > self.level + step:
            jump = lo - self.level
            if (
                self.phase == "starting"
                and jump >= cfg.dominant_fraction * cap
                and jump >= cfg.dominant_factor * self.max_jump
            ):
                # The KV pool: one allocation much larger than any before it (weight shards are alike).
                self.regime_t, self.regime_level = now, lo
            self.max_jump = max(self.max_jump, jump)
            self.level = lo
            self.last_rise_t = now
            self.falling = False
        elif lo < self.level - step:
            self.level = lo
            if not self.falling and (self.exit_t is None or now - self.exit_t >= cfg.exit_grace_s):
                # One release per fall, however gradual (a daily cycle falls for hours): cycles, not steps.
                self.release_times.append(now)
                if self.phase == "starting":
                    self.releases += 1
            self.falling = True
        if self.phase == "starting":
            why, loaded = "", now
            began = self.start_t if self.start_t is not None else now  # a trace's clock may start at 0.0
            if engine_up_since is not None and engine_up_since >= began - cfg.eval_interval_s:
                why = "the engine answered"
            elif (
                now - self.last_rise_t >= cfg.settle_s
                and now - began >= cfg.settle_s
                and (self.budget is None or self.regime_t is not None)
            ):  # a pool engine: after its KV jump
                why, loaded = f"memory held steady for {cfg.settle_s:.0f} s", self.last_rise_t
            elif self.releases >= 2:
                why = "it started to cycle (serving a load)"
            elif now - began >= cfg.start_max_s:
                why = f"{cfg.start_max_s / 60:.0f} minutes passed"
            if why:
                self.phase = "serving"
                self.serving_since, self.loaded_at = now, loaded
                self.end_reason = why
                self.hw_level = lo
                self.hw_times.clear()
        elif self.phase == "serving":
            # The caching allocator steps its high-water mark up ever more rarely (the records of its load's
            # demand); a leak keeps stepping at its own pace. When it stepped is what tells them apart.
            if lo >= self.hw_level + cfg.transient_min_bytes:
                self.hw_times.append(now)
                self.hw_level = lo
            elif lo < self.hw_level - step:
                self.hw_level = lo
        return self.phase

    def _start(self, now: float, lo: float, new: frozenset[int], procs: dict[int, Any]) -> None:
        self.phase = "starting"
        self.start_t = now
        self.serving_since = self.loaded_at = None
        self.idle_since = None
        self.level = lo
        self.last_rise_t = now
        self.regime_t, self.regime_level = None, lo
        self.releases = 0
        self.tallest = 0.0
        self.release_times.clear()
        self.falling = False
        self.max_jump = 0.0
        self.starts += 1
        self.kind, self.budget = None, None
        self.refresh_kind(new, procs)

    def refresh_kind(self, pids: frozenset[int], procs: dict[int, Any]) -> None:
        """A process scan may describe the server after its first sample: learn what it is late."""
        for pid in pids:
            p, hops = procs.get(pid), 0
            while p is not None and hops < 4:  # a worker's own command line may be multiprocessing's
                kind, budget = server_kind(p.cmdline, p.name or "")
                if kind:
                    self.kind, self.budget = kind, budget
                    return
                p, hops = procs.get(p.ppid) if p.ppid else None, hops + 1
