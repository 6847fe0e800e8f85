"""The allocator probe: runs INSIDE a PyTorch server process (opt-in) and tells live tensors from cache.

NVML sees what the CUDA driver handed out; PyTorch's caching allocator keeps freed blocks, so from the
outside a healthy cache filling up and a real leak look the same. Inside the process,
`torch.cuda.memory_stats()` tells them apart: bytes of live tensors (allocated), the reserved pool,
fragmentation (inactive split bytes), `num_alloc_retries` (the allocator had to flush its cache to satisfy
a request: the last warning before an OOM) and `num_ooms`.

Every `OOMWATCH_PROBE_INTERVAL` seconds (default 1) a daemon thread writes those numbers for each CUDA
device this process already uses to `OOMWATCH_PROBE_DIR/<pid>.json` (default `/dev/shm/oomwatch`),
replaced atomically (format `oomwatch-probe/1`, DESIGN.md). The oomwatch daemon reads that directory.

Rules this module keeps, because it lives in someone else's process:
- it imports only the standard library, and torch only once the host has imported it (never numpy, never
  the rest of oomwatch);
- it never initialises CUDA and never allocates GPU memory: without `torch.cuda.is_initialized()` it
  reports no device, and it reads only devices whose allocator already holds memory;
- it never raises into the host: every tick is guarded, and a failing tick is logged once per kind;
- a missing or unwritable directory disables it with one log line;
- after `fork()` (vLLM forks workers) the child restarts the thread and writes its own file.

Loading without code changes: `oomwatch.probe.vllm.register` (a `vllm.general_plugins` entry point) and
`oomwatch.probe.autostart` (a `.pth` start hook), both gated on `OOMWATCH_PROBE=1`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

FORMAT = "oomwatch-probe/1"
DEFAULT_DIR = "/dev/shm/oomwatch"
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.05  # below this the probe would cost more than it tells

log = logging.getLogger("oomwatch.probe")

__all__ = ["FORMAT", "DEFAULT_DIR", "Probe", "enabled", "start", "stop", "read_devices"]


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the opt-in variable is set (`OOMWATCH_PROBE=1`)."""
    return environ.get("OOMWATCH_PROBE", "").strip().lower() in ("1", "true", "yes", "on")


def _interval(environ: Mapping[str, str] = os.environ) -> float:
    try:
        v = float(environ.get("OOMWATCH_PROBE_INTERVAL", DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return v if v >= MIN_INTERVAL_S else DEFAULT_INTERVAL_S


def _stat(stats: dict[str, Any], key: str) -> int:
    v = stats.get(key)
    return int(v) if isinstance(v, (int, float)) else 0


def read_devices(torch: Any, uuids: dict[int, str | None]) -> list[dict[str, Any]]:
    """The stats of every CUDA device this process already uses; [] when CUDA is not initialised.

    Touches nothing that creates a context: `is_initialized()` first, then the allocator's own counters
    (`memory_stats(i)` reads host-side structures), and the device properties (cached by torch at init)
    only for a device whose allocator holds memory. `uuids` caches index -> "GPU-..." between calls.
    """
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    out = []
    for i in range(cuda.device_count()):
        stats = cuda.memory_stats(i)
        if not stats:
            continue
        reserved = _stat(stats, "reserved_bytes.all.current")
        if reserved == 0 and _stat(stats, "reserved_bytes.all.peak") == 0:
            continue  # this process has never put memory on device i: not ours to report
        if i not in uuids:
            uuids[i] = _uuid(cuda, i)
        out.append(
            {
                "uuid": uuids[i],
                "index": i,
                "allocated_bytes": _stat(stats, "allocated_bytes.all.current"),
                "reserved_bytes": reserved,
                "active_bytes": _stat(stats, "active_bytes.all.current"),
                "inactive_split_bytes": _stat(stats, "inactive_split_bytes.all.current"),
                "alloc_retries": _stat(stats, "num_alloc_retries"),
                "ooms": _stat(stats, "num_ooms"),
            }
        )
    return out


def _uuid(cuda: Any, i: int) -> str | None:
    """NVML's spelling of the card's UUID ("GPU-<hex>"), so the daemon can join on it; None if torch is too
    old to say (the daemon then cannot place the device and leaves it out)."""
    try:
        u = getattr(cuda.get_device_properties(i), "uuid", None)
    except Exception:  # noqa: BLE001 - never raise into the host
        return None
    if u is None:
        return None
    s = str(u)
    return s if s.startswith(("GPU-", "MIG-")) else "GPU-" + s


class Probe:
    """One probe per process: a daemon thread that writes this PID's file every `interval_s`."""

    def __init__(
        self,
        directory: str = DEFAULT_DIR,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ):
        self.directory = directory
        self.interval_s = interval_s
        self.clock = clock
        self.pid = os.getpid()
        self.disabled: str | None = None
        self.ticks = 0
        self._uuids: dict[int, str | None] = {}
        self._said: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._devices_seen = False

    # ---- one tick --------------------------------------------------------------------------------
    def path(self) -> str:
        return os.path.join(self.directory, f"{self.pid}.json")

    def check_directory(self) -> bool:
        """A missing or unwritable directory disables the probe with one log line."""
        if not os.path.isdir(self.directory):
            self._disable(
                f"{self.directory} does not exist; probe disabled (create it, or share the daemon's "
                "volume, and restart the process)"
            )
        elif not os.access(self.directory, os.W_OK | os.X_OK):
            self._disable(f"{self.directory} is not writable; probe disabled")
        return self.disabled is None

    def _disable(self, why: str) -> None:
        self.disabled = why
        self._stop.set()
        self.say(why)

    def say(self, msg: str, once: str | None = None) -> None:
        key = once or msg
        if key in self._said:
            return
        self._said.add(key)
        log.warning("oomwatch probe (pid %d): %s", self.pid, msg)

    def tick(self) -> bool:
        """Read and write once; never raises. True when a file was written."""
        try:
            return self._tick()
        except Exception as e:  # noqa: BLE001 - never raise into the host
            self.say(f"probe tick failed: {type(e).__name__}: {e}", once=type(e).__name__)
            return False

    def _tick(self) -> bool:
        if self.disabled:
            return False
        torch = sys.modules.get("torch")
        spec = getattr(torch, "__spec__", None)
        if torch is None or getattr(spec, "_initializing", False) or not hasattr(torch, "cuda"):
            return False  # torch not (fully) imported yet: nothing to read
        devices = read_devices(torch, self._uuids)
        if devices and not self._devices_seen:
            self._devices_seen = True
            self.say(f"writing allocator stats of {len(devices)} CUDA device(s) to {self.path()}")
        elif not devices and not self._devices_seen:
            why = "torch.cuda is not available" if not _cuda_available(torch) else "CUDA not initialised yet"
            self.say(f"no CUDA device in use in this process ({why}); writing no device stats", once="no-device")
        doc = {
            "format": FORMAT,
            "pid": self.pid,
            "time": round(self.clock(), 3),
            "interval_s": self.interval_s,
            "devices": devices,
        }
        self._write(json.dumps(doc, separators=(",", ":")))
        self.ticks += 1
        return True

    def _write(self, text: str) -> None:
        tmp = os.path.join(self.directory, f".{self.pid}.json.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path())
        except OSError as e:
            self._disable(f"cannot write {self.path()}: {e.strerror or e}; probe disabled")

    # ---- the thread ------------------------------------------------------------------------------
    def start(self) -> bool:
        if not self.check_directory():
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="oomwatch-probe", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def stop(self, remove: bool = True) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2 * self.interval_s + 1)
        self._thread = None
        if remove and self.pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(self.path())


def _cuda_available(torch: Any) -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


_lock = threading.Lock()
_probe: Probe | None = None
_fork_hook = False


def start(
    directory: str | None = None, interval_s: float | None = None, environ: Mapping[str, str] = os.environ
) -> Probe | None:
    """Start this process's probe once (idempotent); None when the directory is unusable.

    Safe to call from an import hook, a plugin or user code: it never raises.
    """
    global _probe, _fork_hook
    try:
        with _lock:
            if _probe is not None and _probe.pid == os.getpid():
                return None if _probe.disabled else _probe
            d = directory or environ.get("OOMWATCH_PROBE_DIR") or DEFAULT_DIR
            p = Probe(d, interval_s or _interval(environ))
            _probe = p
            if not _fork_hook and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _fork_hook = True
            return p if p.start() else None
    except Exception as e:  # noqa: BLE001 - never raise into the host
        log.warning("oomwatch probe could not start: %s: %s", type(e).__name__, e)
        return None


def stop() -> None:
    """Stop the probe and remove this PID's file (tests, orderly shutdown)."""
    global _probe
    with _lock:
        p, _probe = _probe, None
    if p is not None:
        p.stop()


def current() -> Probe | None:
    return _probe


def _after_fork_in_child() -> None:
    """The thread did not survive the fork: start a new probe for the child's own PID (its own file)."""
    global _probe, _lock
    old = _probe
    _lock = threading.Lock()  # the parent's lock may have been held at fork time
    if old is None or old.disabled:
        return
    _probe = None
    start(old.directory, old.interval_s)


import atexit  # noqa: E402 - registered last: the exit handler needs `stop` defined

atexit.register(stop)
