"""NVML, the only way oomwatch reads a GPU. It never creates a CUDA context (no torch, no cupy).

Every call goes through `NvmlSource._q`: an `NVMLError` becomes None and is remembered as the card's
error, a function the driver lacks is logged once. Above this module nothing raises because of NVML: a
lost card reads as None values and `source_up{source="nvml"} 0`, and the daemon keeps serving.

Memory comes from `nvmlDeviceGetMemoryInfo_v2` (its `used` excludes the driver's reserved memory; v1 counts
it as used, 645 MB on an idle H200), falling back to v1 where the driver lacks v2. MIG: with MIG mode on,
each MIG instance NVML lets us open is watched as a card of its own (its memory is its
own: a server in a 3g.71gb instance runs out at 71 GB whatever the card holds), indexed
`MIG_INDEX_BASE * (card + 1) + n` so it never collides with a card index, named and identified by the
instance (`... MIG 3g.71gb`, `MIG-...` UUID, `mig_instance` "gi1/ci0"). Where the instances cannot be read
(no permission inside a container, an old driver, no instance created), the whole card is watched and
`GpuInfo.mig_note` says why, which the analysis reports as a finding.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import NvmlUnavailable  # one line for the user; defined with the other user errors
from ..model import GpuInfo, GpuSample, Sample, SourceStatus

log = logging.getLogger("oomwatch.nvml")


MIG_INDEX_BASE = 1000  # MIG instance n of card c is watched as index 1000 * (c + 1) + n
OPEN_ATTEMPTS = 3  # a card's handle and memory size are asked this many times at open before giving up
OPEN_RETRY_S = 0.1  # between those attempts


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


class NvmlSource:
    name = "nvml"

    def __init__(self, lib: Any = None):  # the pynvml module (untyped) or a stand-in with its functions
        self._lib = lib
        self._handles: list[Any] = []  # NVML device handles, opaque
        self.gpus: tuple[GpuInfo, ...] = ()
        self.errors: dict[int, str] = {}
        self._missing: set[str] = set()
        self._v1_only: set[int] = set()  # cards (or -1: the whole driver) without memory info v2
        self.driver: str | None = None
        self.status = SourceStatus("nvml", False, "not started")

    # One query function: NVML errors and sentinels become None here and nowhere else.
    def _q(self, fn_name: str, *args: Any, gpu: int | None = None) -> Any:
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
            raise NvmlUnavailable(
                f"NVML is not available here ({e}); use --replay TRACE to run without a GPU"
            ) from None
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU; use --replay TRACE to run without a GPU")
        drv = self._q("nvmlSystemGetDriverVersion")
        self.driver = drv.decode() if isinstance(drv, bytes) else drv
        infos = []
        handles = []
        for i in range(count):
            h = self._handle(i)  # NvmlUnavailable: one line naming the card
            name = _text(self._q("nvmlDeviceGetName", h, gpu=i)) or "GPU"
            uuid = _text(self._q("nvmlDeviceGetUUID", h, gpu=i)) or f"GPU-index-{i}"
            total = self._total(h, i)
            if total is None:
                log.warning(
                    "GPU %d (%s): its memory size cannot be read (%s); it is left out rather than watched as a "
                    "card of 0 bytes",
                    i,
                    uuid,
                    self.errors.get(i, "no answer"),
                )
                continue
            mig = self._q("nvmlDeviceGetMigMode", h, gpu=i)
            mig_on = bool(mig and mig[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1))
            parent = GpuInfo(i, name, uuid, total, mig_on)
            if mig_on:
                instances, why = self._mig_instances(h, i, name)
                if instances:
                    for mh, info in instances:
                        handles.append(mh)
                        infos.append(info)
                        log.info(
                            "GPU %d MIG instance %s (%s) watched as GPU %d", i, info.mig_instance, info.name, info.index
                        )
                    continue
                parent = GpuInfo(i, name, uuid, parent.total_bytes, True, mig_note=why)
                log.warning(
                    "GPU %d has MIG mode on but its instances cannot be read (%s): oomwatch watches the whole card",
                    i,
                    why,
                )
            handles.append(h)
            infos.append(parent)
        if not infos:
            raise NvmlUnavailable(
                f"NVML cannot read the memory size of any of the {count} GPU(s) "
                f"({'; '.join(f'GPU {i}: {e}' for i, e in sorted(self.errors.items())) or 'no answer'})"
            )
        self._handles = handles
        self.errors.clear()
        self.gpus = tuple(infos)
        return self.gpus

    def _handle(self, i: int) -> Any:
        """Card `i`'s handle, asked up to `OPEN_ATTEMPTS` times (a card still initialising answers late);
        a card that cannot be opened is a one-line `NvmlUnavailable`, never an NVMLError traceback."""
        nv = self._lib
        for attempt in range(OPEN_ATTEMPTS):
            try:
                return nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as e:
                if attempt == OPEN_ATTEMPTS - 1:
                    raise NvmlUnavailable(
                        f"NVML cannot open GPU {i} ({e}); check `nvidia-smi -i {i}`, or hide the card from the "
                        "container (NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)"
                    ) from None
                time.sleep(OPEN_RETRY_S)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _total(self, h: Any, i: int) -> int | None:
        """The card's memory size, asked up to `OPEN_ATTEMPTS` times; None when it cannot be read (or reads
        0): every ratio divides by it, so a card of 0 bytes is never recorded."""
        for attempt in range(OPEN_ATTEMPTS):
            mem = self._q("nvmlDeviceGetMemoryInfo", h, gpu=i)
            total = getattr(mem, "total", None)
            if isinstance(total, int) and total > 0:
                return total
            if attempt < OPEN_ATTEMPTS - 1:
                time.sleep(OPEN_RETRY_S)
        return None

    def _mig_instances(self, h: Any, i: int, parent_name: str) -> tuple[list[tuple[Any, GpuInfo]], str | None]:
        """([(handle, GpuInfo)] of the card's MIG instances, or [] and why they cannot be read)."""
        nv = self._lib
        if not hasattr(nv, "nvmlDeviceGetMigDeviceHandleByIndex"):
            return [], "these NVML bindings have no MIG device calls (upgrade nvidia-ml-py)"
        try:
            n = nv.nvmlDeviceGetMaxMigDeviceCount(h)
        except nv.NVMLError as e:
            return [], f"nvmlDeviceGetMaxMigDeviceCount: {e}"
        out, errors = [], []
        for k in range(int(n or 0)):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except nv.NVMLError as e:
                if "Not Found" not in str(e):  # an empty slot is not an error
                    errors.append(str(e))
                continue
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(mh)
            except nv.NVMLError as e:
                errors.append(f"memory of MIG device {k}: {e}")
                continue
            gi = self._q("nvmlDeviceGetGpuInstanceId", mh)
            ci = self._q("nvmlDeviceGetComputeInstanceId", mh)
            name = _text(self._q("nvmlDeviceGetName", mh)) or f"{parent_name} MIG"
            uuid = _text(self._q("nvmlDeviceGetUUID", mh)) or f"MIG-index-{i}-{k}"
            out.append(
                (
                    mh,
                    GpuInfo(
                        MIG_INDEX_BASE * (i + 1) + k,
                        name,
                        uuid,
                        int(mem.total),
                        True,
                        mig_parent=i,
                        mig_instance=f"gi{gi}/ci{ci}" if gi is not None else f"mig{k}",
                    ),
                )
            )
        if out:
            return out, None
        if errors:
            return [], errors[0]
        return [], "no MIG instance is created on it (nvidia-smi mig -cgi ... -C)"

    def _memory(self, h: Any, i: int) -> tuple[int | None, int | None, int | None]:
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

    def _procs(self, h: Any, i: int) -> tuple[tuple[int, int | None], ...]:
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
        for pos, h in enumerate(self._handles):
            info = self.gpus[pos] if pos < len(self.gpus) else GpuInfo(pos, "", "", 0)
            i = info.index
            used, free, reserved = self._memory(h, i)
            # a MIG instance has no utilisation of its own in NVML (Not Supported): do not ask every sample
            util = None if info.mig_parent is not None else self._q("nvmlDeviceGetUtilizationRates", h, gpu=i)
            procs = self._procs(h, i) if with_procs else ()
            out.append(GpuSample(i, used, free, reserved, None if util is None else int(util.gpu), procs))
        dt = time.perf_counter() - t0
        lost = [g.index for g in out if g.used_bytes is None]
        err = "; ".join(f"GPU {i}: {self.errors[i]}" for i in lost if i in self.errors) or None
        self.status = SourceStatus("nvml", not lost, err, dt)
        return Sample(time.monotonic() if t is None else t, tuple(out))

    @property
    def cards(self) -> tuple[GpuInfo, ...]:
        return self.gpus

    def poll(self, now: float | None = None) -> list[object]:
        """The `Source` protocol: one sample of every card, taken at `now`."""
        return [self.read(now)]

    def close(self) -> None:
        try:
            if self._lib is not None:
                self._lib.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down; nothing to report to
            pass
