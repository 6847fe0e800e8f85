"""#22: storage fails loudly. --state-dir and --flight-dir are checked writable at start, one daemon owns a
state folder (a second gets one line and exit 2), SIGHUP saves the state and the daemon goes on, and flight
dumps never overwrite each other, count only what was written and keep a bounded process table."""

import os
import signal
import subprocess
import time

import pytest
from test_cli import one_line_exit_2, oomwatch

from conftest import daemon_run_argv, example, free_port, stop_process
from oomwatch import state
from oomwatch.config import DaemonConfig
from oomwatch.errors import UsageError
from oomwatch.exporters.recorder import MIN_PROCS_KEPT, FlightRecorder
from oomwatch.flight import FlightDumps
from oomwatch.model import GpuInfo, GpuSample, ProcInfo, Sample
from oomwatch.run import check

UNWRITABLE = "/proc/oomwatch-cannot-be-made"  # even root cannot make a folder in /proc


@pytest.mark.parametrize("field,flag", [("state_dir", "--state-dir"), ("flight_dir", "--flight-dir")])
def test_an_unwritable_folder_is_refused_at_start(tmp_path, field, flag):
    with pytest.raises(UsageError, match=f"{flag} .*cannot write"):
        check(DaemonConfig(**{field: UNWRITABLE}))
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write|not a folder"):
        check(DaemonConfig(**{field: str(tmp_path / "file" / "sub")}))
    check(DaemonConfig(**{field: str(tmp_path / "new" / "dir")}))  # made, and written to
    assert os.listdir(tmp_path / "new" / "dir") == []  # the write test leaves nothing behind


def test_the_cli_says_so_in_one_line(tmp_path):
    one_line_exit_2(
        oomwatch("run", "--replay", example("staircase.jsonl"), "--state-dir", UNWRITABLE, "--duration", "1"),
        "--state-dir",
    )


def test_one_daemon_per_state_folder(tmp_path):
    d = str(tmp_path / "state")
    first = state.lock(d)
    try:
        with pytest.raises(UsageError, match="in use by another oomwatch"):
            state.lock(d)
        r = oomwatch(
            "run", "--listen", f"127.0.0.1:{free_port()}", "--replay", example("staircase.jsonl"),
            "--state-dir", d, "--duration", "1",
        )  # fmt: skip
        one_line_exit_2(r, "in use by another oomwatch")
    finally:
        first.close()
    state.lock(d).close()  # released with its holder


def test_state_writes_use_unique_temporary_names(tmp_path, monkeypatch):
    """Two writers (the minute's save and a SIGHUP's) must not share one temporary file."""
    import synth
    from oomwatch.analysis.analyzer import Analyzer

    names = []
    real = os.replace

    def spy(src, dst):
        names.append(os.path.basename(src))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    a = Analyzer(synth.info(1))
    state.save(a, str(tmp_path))
    state.save(a, str(tmp_path))
    assert len(names) == 2 and names[0] != names[1] and all(n.endswith(".tmp") for n in names)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_sighup_saves_the_state_and_the_daemon_goes_on(tmp_path):
    d = tmp_path / "state"
    port = free_port()
    p = subprocess.Popen(
        daemon_run_argv(port, "--replay", example("staircase.jsonl"), "--loop", "--state-dir", str(d)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (d / state.LOCK_NAME).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # the sampler is running
        assert not [n for n in os.listdir(d) if n.endswith(".json")]  # nothing saved yet (every 60 s)
        p.send_signal(signal.SIGHUP)
        while not [n for n in os.listdir(d) if n.endswith(".json")] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [n for n in os.listdir(d) if n.endswith(".json")], "SIGHUP saved nothing"
        time.sleep(0.5)
        assert p.poll() is None, p.stderr.read()  # still running
    finally:
        rc = stop_process(p)
    assert rc == 0


# ---- flight dumps ----------------------------------------------------------------------------------------
GPUS = (GpuInfo(0, "g", "GPU-f", 1000),)


def _recorder():
    fr = FlightRecorder(60.0)
    fr.add(Sample(0.0, (GpuSample(0, 10, 990, 0, 0, ((7, 10),)),)))
    return fr


def test_two_dumps_of_one_alert_in_one_second_never_collide(tmp_path):
    fd = FlightDumps(_recorder(), str(tmp_path), GPUS)
    paths = [fd.dump("GPUMemoryLeak") for _ in range(3)]
    fd.join()
    assert len(set(paths)) == 3 and all(p and os.path.getsize(p) > 0 for p in paths)
    assert fd.count == 3 and sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)


def test_the_counter_counts_only_dumps_written(tmp_path):
    class Failing:
        def frozen(self):
            return self

        def dump(self, path, gpus, reason):
            raise OSError(28, "No space left on device")

    fd = FlightDumps(Failing(), str(tmp_path), GPUS)
    fd.dump("GPUMemoryLeak")
    fd.join()
    assert fd.count == 0 and not fd.status.up and "No space" in fd.status.error
    assert os.listdir(tmp_path) == []  # the reserved name is given back


def test_the_process_table_stays_bounded_under_pid_churn():
    fr = FlightRecorder(10.0)
    for i in range(20_000):  # a new short-lived PID every sample, 10 samples a second
        t = i * 0.1
        fr.add_proc(t, ProcInfo(10_000 + i, "worker", ("w",)))
        fr.add(Sample(t, (GpuSample(0, 10, 990, 0, 0, ((10_000 + i, 10),)),)))
    assert len(fr._procs) <= 2 * max(MIN_PROCS_KEPT, 101)
    assert 10_000 + 19_999 in fr._procs  # the live one is kept
