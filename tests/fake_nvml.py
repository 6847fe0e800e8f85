# ruff: noqa: N802, N816 - the names mirror pynvml's, which the code under test calls
"""A fake pynvml module: the test seam at the NVML boundary (NVML itself cannot run without a GPU).

It mirrors the few calls oomwatch makes, with the same error type and sentinels, and lets a test make
any call fail on any card (GPU lost, not supported, unknown error, timeout) or NVML vanish.
"""

from types import SimpleNamespace


class NVMLError(Exception):
    def __init__(self, value, msg=None):
        self.value = value
        super().__init__(
            msg
            or {
                1: "Uninitialized",
                3: "Not Supported",
                10: "Timeout",
                15: "GPU is lost",
                999: "Unknown Error",
                9: "Driver Not Loaded",
                13: "Function Not Found",
                6: "Not Found",
                4: "Insufficient Permissions",
            }.get(value, "error")
        )


NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_GPU_IS_LOST = 15
nvmlMemory_v2 = object()


class FakeNvml:
    """Build one, set .cards, and pass it as `lib=` to NvmlSource."""

    NVMLError = NVMLError
    NVML_VALUE_NOT_AVAILABLE = NVML_VALUE_NOT_AVAILABLE
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, cards=2, total=150_754_820_096, v2=True, init_error=None):
        """A card may get `"mig": [instance, ...]` (MIG mode on), each instance a dict with `gi`, `ci`,
        `name`, `uuid`, `total`, `used`, `procs`; `"mig_slots"` (default 7) is the card's maximum count of
        MIG devices, whose other slots are empty (Not Found, as NVML answers)."""
        self.total = total
        self.cards = [
            {"used": 0, "reserved": 644_939_776, "procs": [], "util": 0, "name": "NVIDIA H200", "uuid": f"GPU-fake-{i}"}
            for i in range(cards)
        ]
        self.fail: dict[tuple[str, int], int] = {}  # (function, gpu) -> NVML error code
        self.init_error = init_error
        self.gone = False
        self.calls = 0
        if v2:
            self.nvmlMemory_v2 = nvmlMemory_v2

    def _check(self, fn, i):
        self.calls += 1
        if self.gone:
            raise NVMLError(1)
        code = self.fail.get((fn, i)) or self.fail.get((fn, -1))
        if code:
            raise NVMLError(code)

    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "580.0-fake"

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex", i)
        return i

    def _dev(self, h):
        """A card (an int handle) or a MIG instance (a ("mig", card, slot) handle)."""
        if isinstance(h, tuple):
            return self.cards[h[1]]["mig"][h[2]]
        return self.cards[h]

    def nvmlDeviceGetName(self, h):
        return self._dev(h)["name"]

    def nvmlDeviceGetUUID(self, h):
        return self._dev(h)["uuid"]

    def nvmlDeviceGetMigMode(self, h):
        self._check("nvmlDeviceGetMigMode", h)
        on = "mig" in self.cards[h]
        return [int(on), int(on)]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return self.cards[h].get("mig_slots", 7) if "mig" in self.cards[h] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, k):
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if k >= len(self.cards[h].get("mig", ())):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return ("mig", h, k)

    def nvmlDeviceGetGpuInstanceId(self, h):
        return self._dev(h)["gi"]

    def nvmlDeviceGetComputeInstanceId(self, h):
        return self._dev(h)["ci"]

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self._check("nvmlDeviceGetMemoryInfo", h)
        c = self._dev(h)
        if isinstance(h, tuple):  # a MIG instance: its own total, no driver reserve of its own
            if version is not None:
                raise NVMLError(3)
            return SimpleNamespace(total=c["total"], used=c["used"], free=c["total"] - c["used"])
        if version is not None and not hasattr(self, "nvmlMemory_v2"):
            raise TypeError("unexpected keyword 'version'")
        if version is None:  # v1: used includes the reserved memory
            return SimpleNamespace(
                total=self.total, used=c["used"] + c["reserved"], free=self.total - c["used"] - c["reserved"]
            )
        return SimpleNamespace(
            total=self.total, used=c["used"], reserved=c["reserved"], free=self.total - c["used"] - c["reserved"]
        )

    def nvmlDeviceGetUtilizationRates(self, h):
        if isinstance(h, tuple):
            raise NVMLError(3)
        self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=self.cards[h]["util"], memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self._dev(h)["procs"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._check("nvmlDeviceGetGraphicsRunningProcesses", h)
        return []
