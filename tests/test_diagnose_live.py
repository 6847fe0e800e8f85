"""`oomwatch diagnose` live (not --replay): it watches through the daemon's own sampler, so everything the
daemon reads (NVML, processes, engines, the allocator probes' directory) reaches the report. NVML is the
fake at the pynvml boundary; the process and the probe file are real."""

from __future__ import annotations

import json
import os
import time

import pytest

from fake_nvml import FakeNvml
from oomwatch import cli, wiring
from oomwatch.sources.nvml import NvmlSource

GiB = 1 << 30


@pytest.fixture
def fake_card(monkeypatch, tmp_path):
    nv = FakeNvml(cards=1)
    me = os.getpid()
    nv.cards[0].update(used=40 * GiB, procs=[(me, 40 * GiB)])

    def open_fake(cfg):
        src = NvmlSource(lib=nv)
        src.open()
        return src

    monkeypatch.setattr(wiring, "open_source", open_fake)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    monkeypatch.setenv("OOMWATCH_PROBE_DIR", str(probe_dir))
    doc = {
        "format": "oomwatch-probe/1",
        "pid": me,
        "time": time.time(),
        "interval_s": 5.0,
        "devices": [
            {
                "uuid": "GPU-fake-0",
                "index": 0,
                "allocated_bytes": 30 * GiB,
                "reserved_bytes": 38 * GiB,
                "active_bytes": 30 * GiB,
                "inactive_split_bytes": 0,
                "alloc_retries": 0,
                "ooms": 0,
            }
        ],
    }
    (probe_dir / f"{me}.json").write_text(json.dumps(doc))
    return nv


def test_live_diagnose_reads_nvml_processes_and_the_probe(fake_card, capsys):
    rc = cli.main(["diagnose", "--duration", "2.5", "--interval", "0.1", "--no-engine-discovery"])
    out = capsys.readouterr().out
    assert rc in (0, 1), out
    assert "GPU 0" in out
    assert "(allocator probe): live tensors 30.0 GiB" in out, out


def test_live_diagnose_json_counts_the_samples(fake_card, capsys):
    cli.main(["diagnose", "--duration", "2", "--interval", "0.1", "--json", "--no-engine-discovery"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["summary"]
    assert summary["samples"] >= 5  # about 20 at 10 Hz; a loaded machine skips cycles, never piles them up
    assert summary["gpus"]["0"]["peak_used_bytes"] == 40 * GiB
