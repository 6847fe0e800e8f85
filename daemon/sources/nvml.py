"""NVML, the only way oomwatch reads a GPU. It never creates a CUDA context (no torch, no cupy).

Every call goes through `NvmlSource._q`: an `NVMLError` becomes None and is remembered as the card's
error, a function the driver lacks is logged once. Above this module nothing raises because of NVML: a
lost card reads as None values and `source_up{source="nvml"} 0`, and the daemon keeps serving.

Memory comes from `nvmlDeviceGetMemoryInfo_v2` (its `used` excludes the driver's reserved memory; v1 counts
it as used, 645 MB on an idle H200), falling back to v1 where the driver lacks v2. MIG: with MIG mode on,
the parent card's numbers are reported and the card is marked `mig`; per-instance memory is not read.
"""

from __future__ import annotations

import logging
import time

from ..model import GpuInfo, GpuSample, Sample, SourceStatus

log = logging.getLogger("oomwatch.nvml")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be started (no driver, no library, no GPU); the message is one line for the user."""


class NvmlSource:
    name = "nvml"

    def __init__(self, lib=None):
        self._lib = lib
        self._handles: list = []
        self.gpus: tuple[GpuInfo, ...] = ()
        self.errors: dict[int, str] = {}
        self._missing: set[str] = set()
        self._v1_only: set[int] = set()  # cards (or -1: the whole driver) without memory info v2
        self.driver: str | None = None
        self.status = SourceStatus("nvml", False, "not started")

    # One query function: NVML errors and sentinels become None here and nowhere else.
    def _q(self, fn_name: str, *args, gpu: int | None = None):
        nv = self._lib
        fn = getattr(nv, fn_name, None)
        if fn is None:
            if fn_name not in self._missing:
                self._missing.add(fn_name)
                log.info("NVML has no %s; skipping it", fn_name)
            return None
        try:
            return fn(*args)
        except nv.NVMLError as e:  # noqa: PERF203 - errors are values here
            if gpu is not None:
                self.errors[gpu] = f"{fn_name}: {e}"
            return None

    def open(self) -> tuple[GpuInfo, ...]:
        if self._lib is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                raise NvmlUnavailable("NVML Python bindings missing: pip install nvidia-ml-py") from None
            self._lib = pynvml
        nv = self._lib
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            raise NvmlUnavailable(f"NVML is not available here ({e}); use --replay TRACE to run without a GPU") from None
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU; use --replay TRACE to run without a GPU")
        drv = self._q("nvmlSystemGetDriverVersion")
        self.driver = drv.decode() if isinstance(drv, bytes) else drv
        infos = []
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            name = self._q("nvmlDeviceGetName", h, gpu=i) or "GPU"
            uuid = self._q("nvmlDeviceGetUUID", h, gpu=i) or f"GPU-index-{i}"
            mem = self._q("nvmlDeviceGetMemoryInfo", h, gpu=i)
            mig = self._q("nvmlDeviceGetMigMode", h, gpu=i)
            infos.append(
                GpuInfo(
                    i,
                    name.decode() if isinstance(name, bytes) else name,
                    uuid.decode() if isinstance(uuid, bytes) else uuid,
                    int(mem.total) if mem is not None else 0,
                    bool(mig and mig[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1)),
                )
            )
        self.errors.clear()
        self.gpus = tuple(infos)
        for g in self.gpus:
            if g.mig:
                log.warning("GPU %d has MIG mode on: oomwatch reports the whole card's memory, not each MIG "
                            "instance's", g.index)
        return self.gpus

    def _memory(self, h, i):
        nv = self._lib
        if -1 not in self._v1_only and i not in self._v1_only and hasattr(nv, "nvmlMemory_v2"):
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
                return m.used, m.free, getattr(m, "reserved", None)
            except TypeError:  # bindings too old for the version argument
                self._v1_only.add(-1)
            except nv.NVMLError as e:
                if "Not Supported" in str(e) or "Function Not Found" in str(e):
                    self._v1_only.add(i)
                else:
                    self.errors[i] = f"nvmlDeviceGetMemoryInfo: {e}"
                    return None, None, None
        m = self._q("nvmlDeviceGetMemoryInfo", h, gpu=i)
        if m is None:
            return None, None, None
        return m.used, m.free, None

    def _procs(self, h, i) -> tuple[tuple[int, int | None], ...]:
        na = getattr(self._lib, "NVML_VALUE_NOT_AVAILABLE", None)
        seen: dict[int, int | None] = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self._q(fn, h, gpu=i) or ():
                b = p.usedGpuMemory
                if b is None or b == na or (isinstance(b, int) and b >= (1 << 63)):
                    b = None  # "not available" is not zero bytes
                prev = seen.get(p.pid)
                seen[p.pid] = b if prev is None else prev + (b or 0)
        return tuple(sorted(seen.items()))

    def read(self, t: float | None = None, with_procs: bool = True) -> Sample:
        """One sample of every card. Never raises for NVML errors."""
        t0 = time.perf_counter()
        self.errors.clear()
        out = []
        for i, h in enumerate(self._handles):
            used, free, reserved = self._memory(h, i)
            util = self._q("nvmlDeviceGetUtilizationRates", h, gpu=i)
            procs = self._procs(h, i) if with_procs else ()
            out.append(
                GpuSample(i, used, free, reserved, None if util is None else int(util.gpu), procs)
            )
        dt = time.perf_counter() - t0
        lost = [i for i, g in enumerate(out) if g.used_bytes is None]
        err = "; ".join(f"GPU {i}: {self.errors[i]}" for i in lost if i in self.errors) or None
        self.status = SourceStatus("nvml", not lost, err, dt)
        return Sample(time.monotonic() if t is None else t, tuple(out))

    def close(self) -> None:
        try:
            if self._lib is not None:
                self._lib.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down; nothing to report to
            pass
