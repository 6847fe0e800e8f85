"""The trace format: reading ignores annotations, a cut last line is tolerated, record -> replay round trips."""

import json
import os

import pytest

from conftest import example
from oomwatch.exporters.recorder import FlightRecorder, TraceRecorder
from oomwatch.model import GpuInfo, GpuSample, ProcInfo, Sample
from oomwatch.trace import TraceError, read_trace


def _records(path):
    h, it = read_trace(path)
    return h, list(it)


def test_reads_samples_and_procs_only():
    h, recs = _records(example("stray.jsonl"))
    assert h.gpus[0].total_bytes == 150754820096
    kinds = {type(r).__name__ for _, r in recs}
    assert kinds == {"Sample", "ProcInfo"}
    procs = [r for _, r in recs if isinstance(r, ProcInfo)]
    assert {p.pid for p in procs} == {925, 928}


def test_annotations_are_never_inputs(tmp_path):
    """Stripping every annotation must not change a single verdict."""
    from oomwatch.cli import main

    src = example("staircase.jsonl")
    stripped = tmp_path / "stripped.jsonl"
    with open(src) as f, open(stripped, "w") as out:
        head = json.loads(f.readline())
        for k in ("scenario", "expect", "note"):
            head.pop(k, None)
        out.write(json.dumps(head) + "\n")
        for line in f:
            o = json.loads(line)
            if "event" in o and o["event"] != "proc":
                continue
            out.write(line)
    import contextlib
    import io

    outs = []
    for p in (src, str(stripped)):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["replay", p, "--json"]) == 0
        outs.append(buf.getvalue())
    assert outs[0] == outs[1]


def test_cut_last_line_is_tolerated(tmp_path):
    src = example("sawtooth.jsonl")
    with open(src) as f:
        data = f.read()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(data[: len(data) - 40])
    _, full = _records(src)
    _, part = _records(str(cut))
    assert len(part) == len(full) - 1


def test_broken_line_in_the_middle_is_an_error(tmp_path):
    with open(example("sawtooth.jsonl")) as f:
        lines = f.read().splitlines()
    lines[10] = lines[10][:20]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    _, it = read_trace(str(p))
    with pytest.raises(TraceError, match=":11: malformed"):
        list(it)


@pytest.mark.parametrize(
    "content,msg",
    [
        ("", "empty"),
        ("hello\n", "not JSON"),
        ('{"a":1}\n', "not a gpu-memory-trace/1"),
        ('{"format":"gpu-memory-trace/1","gpus":[]}\n', "no GPU"),
    ],
)
def test_bad_headers(tmp_path, content, msg):
    p = tmp_path / "x.jsonl"
    p.write_text(content)
    with pytest.raises(TraceError, match=msg):
        read_trace(str(p))


def test_record_then_replay_round_trip(tmp_path):
    gpus = (GpuInfo(0, "NVIDIA H200", "GPU-x", 1000), GpuInfo(1, "NVIDIA H200", "GPU-y", 1000))
    samples = [
        Sample(
            round(i * 0.05, 4), (GpuSample(0, 100 + i, 900 - i, 5, 3, ((7, 100 + i),)), GpuSample(1, 0, 995, 5, 0, ()))
        )
        for i in range(50)
    ]
    p = str(tmp_path / "r.jsonl")
    rec = TraceRecorder(p, gpus, 20.0, "drv")
    rec.proc(0.0, ProcInfo(7, "python3", ("python3", "serve.py", "--api-key", "sk-abcdefghijkl"), 1, 1.0, "u"))
    for s in samples:
        rec.sample(s)
    rec.close()
    h, recs = _records(p)
    assert h.gpus == gpus
    got = [r for _, r in recs if isinstance(r, Sample)]
    assert got == samples
    with open(p) as f:
        text = f.read()
    assert "sk-abcdefghijkl" not in text and "<redacted>" in text


def test_recorder_survives_a_failing_disk(tmp_path):
    gpus = (GpuInfo(0, "g", "u", 1000),)
    p = str(tmp_path / "r.jsonl")
    rec = TraceRecorder(p, gpus)
    rec.sample(Sample(0.0, (GpuSample(0, 1),)))
    rec._f.close()  # the file goes away under the recorder (disk gone, folder removed)
    rec._f = open(os.devnull)  # noqa: SIM115  # writes now fail with OSError; the recorder closes it
    rec.sample(Sample(0.1, (GpuSample(0, 2),)))
    assert not rec.status.up and "cannot write" in rec.status.error
    rec.sample(Sample(0.2, (GpuSample(0, 3),)))  # no exception
    _, recs = _records(p)
    assert [r.gpus[0].used_bytes for _, r in recs] == [1]  # what was written stays


def test_flight_recorder_dumps_last_window(tmp_path):
    fr = FlightRecorder(window_s=1.0)
    for i in range(40):
        fr.add(Sample(i * 0.1, (GpuSample(0, i),)))
    p = fr.dump(str(tmp_path / "f.jsonl"), (GpuInfo(0, "g", "u", 100),), "test")
    _, recs = _records(p)
    ts = [r.t for _, r in recs]
    assert ts[0] >= 2.9 - 1e-9 and ts[-1] == pytest.approx(3.9)


def test_recorder_notices_its_folder_removed(tmp_path):
    import shutil

    gpus = (GpuInfo(0, "g", "u", 1000),)
    d = tmp_path / "rec"
    d.mkdir()
    rec = TraceRecorder(str(d / "r.jsonl"), gpus)
    for i in range(50):
        rec.sample(Sample(i * 0.1, (GpuSample(0, i),)))
    assert rec.status.up
    shutil.rmtree(d)
    for i in range(200):  # no exception, and the status says why it stopped
        rec.sample(Sample(5 + i * 0.1, (GpuSample(0, i),)))
    assert not rec.status.up and "removed" in rec.status.error
