"""The NVML source through a fake at the pynvml boundary: errors become values, never exceptions."""

import pytest

from fake_nvml import NVML_VALUE_NOT_AVAILABLE, FakeNvml
from oomwatch.sources.nvml import NvmlSource, NvmlUnavailable


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

    code = (
        "import sys, oomwatch.cli, oomwatch.sampler, oomwatch.sources.nvml, oomwatch.exporters.metrics;"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','cupy')]; print(bad); sys.exit(bool(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---- MIG -----------------------------------------------------------------------------------------------
def _mig_card(nv, i=0):
    nv.cards[i]["mig"] = [
        {
            "gi": 1,
            "ci": 0,
            "name": "NVIDIA H200 MIG 3g.71gb",
            "uuid": "MIG-aaaa",
            "total": 71 << 30,
            "used": 60 << 30,
            "procs": [(4242, 59 << 30)],
        },
        {
            "gi": 2,
            "ci": 0,
            "name": "NVIDIA H200 MIG 1g.18gb",
            "uuid": "MIG-bbbb",
            "total": 18 << 30,
            "used": 2 << 30,
            "procs": [],
        },
    ]


def test_mig_instances_are_watched_each_with_its_own_memory_and_labels():
    from oomwatch.sources.nvml import MIG_INDEX_BASE

    nv = FakeNvml(cards=2)
    _mig_card(nv, 0)
    src = NvmlSource(lib=nv)
    gpus = src.open()
    assert [(g.index, g.uuid, g.mig_parent, g.mig_instance) for g in gpus] == [
        (MIG_INDEX_BASE, "MIG-aaaa", 0, "gi1/ci0"),
        (MIG_INDEX_BASE + 1, "MIG-bbbb", 0, "gi2/ci0"),
        (1, "GPU-fake-1", None, None),
    ]
    assert gpus[0].total_bytes == 71 << 30 and "3g.71gb" in gpus[0].name
    s = src.read()
    by = {g.index: g for g in s.gpus}
    assert by[MIG_INDEX_BASE].used_bytes == 60 << 30 and by[MIG_INDEX_BASE].procs == ((4242, 59 << 30),)
    assert by[MIG_INDEX_BASE + 1].used_bytes == 2 << 30 and by[MIG_INDEX_BASE].util_percent is None
    assert src.status.up  # a MIG instance without utilisation is not a lost card


def test_mig_instance_near_its_own_limit_is_judged_against_it():
    """60 of 71 GB in the instance is 85 % full, although the card is at 43 %: the analysis sees the instance."""
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.model import Sample

    nv = FakeNvml(cards=1)
    _mig_card(nv)
    src = NvmlSource(lib=nv)
    a = Analyzer(src.open())
    for k in range(30):
        a.add_sample(Sample(k * 0.1, src.read(k * 0.1).gpus))
    assert a.gpus[1000].capacity_bytes == 71 << 30
    assert not [f for f in a.summary()["findings"] if f["kind"] == "mig_unreadable"]


@pytest.mark.parametrize(
    "fail,why",
    [
        (("nvmlDeviceGetMaxMigDeviceCount", 0), "Insufficient Permissions"),
        (("nvmlDeviceGetMigDeviceHandleByIndex", 0), "Insufficient Permissions"),
        (None, "no MIG instance is created"),
    ],
)
def test_mig_unreadable_falls_back_to_the_card_and_says_why(fail, why):
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.model import Sample

    nv = FakeNvml(cards=1)
    nv.cards[0]["mig"] = [] if fail is None else nv.cards[0].get("mig", [])
    if fail is not None:
        _mig_card(nv)
        nv.fail[fail] = 4
    src = NvmlSource(lib=nv)
    gpus = src.open()
    assert len(gpus) == 1 and gpus[0].index == 0 and gpus[0].mig and why in gpus[0].mig_note
    a = Analyzer(gpus)
    for k in range(30):  # past the analysis' first evaluations
        a.add_sample(Sample(k * 0.1, src.read(k * 0.1).gpus))
    fs = [f for f in a.summary()["findings"] if f["kind"] == "mig_unreadable"]
    assert len(fs) == 1 and why in fs[0]["summary"] and fs[0]["severity"] == "info"
    assert "NVIDIA_MIG_MONITOR_DEVICES" in fs[0]["advice"]
