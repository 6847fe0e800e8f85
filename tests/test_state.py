"""`--state-dir`: the analysis history survives a daemon restart; another card, or a bad file, starts empty."""

import json
import logging
import os

import numpy as np

import synth
from conftest import example, free_port
from oomwatch import state
from oomwatch.analysis.analyzer import Analyzer
from oomwatch.model import GpuInfo


def _fed(seconds=120.0, info=None):
    a = Analyzer(info or synth.info(1))
    for s in synth.trace([synth.staircase(base=0.2, step=1 * synth.GiB, every=10.0)], seconds):
        a.add_sample(s)
    return a


def test_history_round_trips_every_level(tmp_path):
    a = _fed()
    assert state.save(a, str(tmp_path)) == 1
    b = Analyzer(synth.info(1))
    assert state.load(b, str(tmp_path)) == 1
    for ra, rb in zip(a.gpus[0].history.levels, b.gpus[0].history.levels, strict=True):
        for xa, xb in zip(ra.arrays(), rb.arrays(), strict=True):
            assert np.array_equal(xa, xb)
    assert len(b.gpus[0].history.levels[1]) > 100  # the 1 s level holds the two minutes


def test_clock_shift_moves_the_times(tmp_path):
    a = _fed(30)
    state.save(a, str(tmp_path), clock_offset=1000.0)
    b = Analyzer(synth.info(1))
    state.load(b, str(tmp_path), clock_offset=400.0)  # the new clock is 600 s ahead of the old one
    ta = a.gpus[0].history.levels[1].arrays()[0]
    tb = b.gpus[0].history.levels[1].arrays()[0]
    assert np.allclose(tb - ta, 600.0)


def test_a_card_with_another_uuid_starts_empty(tmp_path):
    state.save(_fed(), str(tmp_path))
    other = (GpuInfo(0, "NVIDIA H200", "GPU-another-card", synth.TOTAL),)
    b = Analyzer(other)
    assert state.load(b, str(tmp_path)) == 0 and len(b.gpus[0].history) == 0


def test_a_corrupt_or_foreign_file_is_set_aside_with_one_line(tmp_path, caplog):
    path = tmp_path / "GPU-synth-0.json"
    path.write_text("{not json")
    b = Analyzer(synth.info(1))
    with caplog.at_level(logging.WARNING, logger="oomwatch.state"):
        assert state.load(b, str(tmp_path)) == 0
    assert len(caplog.records) == 1 and "set aside" in caplog.records[0].getMessage()
    assert not path.exists() and (tmp_path / "GPU-synth-0.json.bad").exists()
    path.write_text(json.dumps({"format": "someone-else/9", "uuid": "GPU-synth-0"}))
    assert state.load(b, str(tmp_path)) == 0 and len(b.gpus[0].history) == 0


def test_the_daemon_writes_its_state_on_exit(tmp_path):
    from oomwatch.config import DaemonConfig
    from oomwatch.run import run

    d = str(tmp_path / "state")
    cfg = DaemonConfig(listen=f"127.0.0.1:{free_port()}", replay=example("staircase.jsonl"), speed=20.0, state_dir=d)
    assert run(cfg, duration=2.0) == 0
    files = [f for f in os.listdir(d) if not f.startswith(".")]  # beside the folder's .lock
    assert len(files) == 1 and files[0].startswith("GPU-") and files[0].endswith(".json")
    with open(os.path.join(d, files[0])) as f:
        doc = json.load(f)
    assert doc["format"] == state.FORMAT
    b = Analyzer((GpuInfo(0, "NVIDIA H200", doc["uuid"], synth.TOTAL),))
    assert state.load(b, d) == 1 and len(b.gpus[0].history) > 0
