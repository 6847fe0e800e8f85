"""The NVML source through a fake at the pynvml boundary: errors become values, never exceptions."""

import pytest

from daemon.sources.nvml import NvmlSource, NvmlUnavailable
from fake_nvml import FakeNvml, NVML_VALUE_NOT_AVAILABLE


def test_reads_v2_memory_and_processes():
    nv = FakeNvml(cards=2)
    nv.cards[0].update(used=40 << 30, procs=[(11, 30 << 30), (12, NVML_VALUE_NOT_AVAILABLE)], util=77)
    src = NvmlSource(lib=nv)
    gpus = src.open()
    assert [g.uuid for g in gpus] == ["GPU-fake-0", "GPU-fake-1"]
    s = src.read(t=1.0)
    g0 = s.gpus[0]
    assert g0.used_bytes == 40 << 30 and g0.reserved_bytes == 644_939_776
    assert g0.util_percent == 77
    # "not available" is None, not 0 bytes
    assert dict(g0.procs) == {11: 30 << 30, 12: None}
    assert src.status.up


def test_falls_back_to_v1_where_driver_lacks_v2():
    nv = FakeNvml(cards=1, v2=False)
    nv.cards[0]["used"] = 10 << 30
    src = NvmlSource(lib=nv)
    src.open()
    s = src.read()
    assert s.gpus[0].used_bytes == (10 << 30) + 644_939_776  # v1 counts reserved as used
    assert s.gpus[0].reserved_bytes is None


@pytest.mark.parametrize("code", [15, 3, 999, 10])  # GPU lost, not supported, unknown, timeout
def test_error_on_one_card_is_a_value(code):
    nv = FakeNvml(cards=2)
    nv.cards[1]["used"] = 5 << 30
    src = NvmlSource(lib=nv)
    src.open()
    nv.fail[("nvmlDeviceGetMemoryInfo", 0)] = code
    s = src.read()
    assert s.gpus[0].used_bytes is None
    assert s.gpus[1].used_bytes == 5 << 30
    assert not src.status.up and "GPU 0" in src.status.error


def test_nvml_gone_after_start_keeps_reading_none():
    nv = FakeNvml(cards=1)
    src = NvmlSource(lib=nv)
    src.open()
    nv.gone = True
    s = src.read()
    assert s.gpus[0].used_bytes is None and not src.status.up


def test_no_driver_is_one_clear_error():
    with pytest.raises(NvmlUnavailable, match="--replay"):
        NvmlSource(lib=FakeNvml(init_error=9)).open()


def test_daemon_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys, daemon.cli, daemon.sampler, daemon.sources.nvml, exporters.metrics;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','cupy')]; print(bad); sys.exit(bool(bad))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
