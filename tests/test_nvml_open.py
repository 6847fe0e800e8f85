"""#22: opening NVML never ends in an NVMLError traceback and never records a card of 0 bytes: a card that
cannot be opened is one clear line (exit 2), a memory size that cannot be read is asked again, then the
card is left out with one warning, never watched as 0 bytes."""

import logging

import pytest

from fake_nvml import NVML_ERROR_GPU_IS_LOST, FakeNvml, NVMLError
from oomwatch.errors import NvmlUnavailable, OomwatchError
from oomwatch.sources import nvml as nvml_mod
from oomwatch.sources.nvml import NvmlSource


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(nvml_mod, "OPEN_RETRY_S", 0.0)


def test_a_card_that_cannot_be_opened_is_one_clear_line():
    nv = FakeNvml(cards=2)
    nv.fail[("nvmlDeviceGetHandleByIndex", 1)] = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(NvmlUnavailable) as e:
        NvmlSource(lib=nv).open()
    assert isinstance(e.value, OomwatchError) and "GPU 1" in str(e.value) and "GPU is lost" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_card_whose_size_cannot_be_read_is_left_out_not_0_bytes(caplog):
    nv = FakeNvml(cards=2)
    nv.fail[("nvmlDeviceGetMemoryInfo", 1)] = 999
    with caplog.at_level(logging.WARNING, logger="oomwatch.nvml"):
        gpus = NvmlSource(lib=nv).open()
    assert [g.index for g in gpus] == [0] and all(g.total_bytes > 0 for g in gpus)
    assert len(caplog.records) == 1 and "GPU 1" in caplog.records[0].getMessage()


def test_a_size_that_fails_once_is_asked_again():
    class Flaky(FakeNvml):
        misses = 1

        def nvmlDeviceGetMemoryInfo(self, h, version=None):  # noqa: N802 - pynvml's name
            if version is None and self.misses:
                self.misses -= 1
                raise NVMLError(10)  # Timeout
            return super().nvmlDeviceGetMemoryInfo(h, version)

    nv = Flaky(cards=1)
    gpus = NvmlSource(lib=nv).open()
    assert [g.total_bytes for g in gpus] == [nv.total]


def test_no_card_readable_is_one_clear_line():
    nv = FakeNvml(cards=2)
    nv.fail[("nvmlDeviceGetMemoryInfo", -1)] = 999
    with pytest.raises(NvmlUnavailable, match="memory size"):
        NvmlSource(lib=nv).open()
