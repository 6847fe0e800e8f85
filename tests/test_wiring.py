"""One place builds a daemon from its config (daemon/wiring.py); DaemonConfig holds every default; the
commands are modules of daemon/commands and daemon/cli.py only parses and dispatches."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

import pytest

from fake_nvml import FakeNvml
from oomwatch import cli, wiring
from oomwatch.config import DaemonConfig
from oomwatch.sources.nvml import NvmlSource

GiB = 1 << 30


@pytest.fixture
def fake_card(monkeypatch, tmp_path):
    nv = FakeNvml(cards=1)
    nv.cards[0].update(used=40 * GiB, procs=[(os.getpid(), 40 * GiB)])
    opened = []

    def open_fake(cfg):
        opened.append(cfg)
        src = NvmlSource(lib=nv)
        src.open()
        return src

    monkeypatch.setattr(wiring, "open_source", open_fake)
    monkeypatch.setenv("OOMWATCH_PROBE_DIR", str(tmp_path / "no-probes"))
    return opened


def test_run_defaults_are_daemon_config_defaults():
    d = DaemonConfig()
    for f in dataclasses.fields(DaemonConfig):
        if f.init and f.default is not dataclasses.MISSING and f.name != "engine_discovery":
            v = getattr(d, f.name)
            assert cli.RUN_DEFAULTS[f.name] == (list(v) if isinstance(v, tuple) else v), f.name
    assert cli.RUN_DEFAULTS["no_engine_discovery"] is (not d.engine_discovery)
    assert cli.RUN_DEFAULTS["duration"] is None


def test_run_without_flags_builds_the_default_config():
    from oomwatch.commands.run import config_from_args

    p = cli.build_parser()
    args = cli.apply_env(p.parse_args(["run"]), {}, p)
    assert config_from_args(args) == DaemonConfig()
    args = cli.apply_env(p.parse_args(["run", "--engine-url", "http://a:1", "--no-engine-discovery"]), {}, p)
    cfg = config_from_args(args)
    assert cfg.engine_url == ("http://a:1",) and cfg.engine_discovery is False


def test_cli_is_parsing_and_dispatch_only():
    import inspect

    src = inspect.getsource(cli)
    assert "Sampler" not in src and "NvmlSource" not in src and "TraceRecorder" not in src
    assert set(cli.COMMANDS) == set(cli.subcommands(cli.build_parser()))
    for name in ("run", "replay", "diagnose", "record", "engines", "examples"):
        mod = __import__(f"oomwatch.commands.{name}", fromlist=["main"])
        assert callable(mod.main)


def test_record_writes_through_the_daemons_sampler(fake_card, tmp_path, monkeypatch):
    """`oomwatch record` is the sampler with a recorder: samples, the holder's description and its RSS."""
    from oomwatch import sampler as sampler_mod

    built = []
    real = sampler_mod.Sampler.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        built.append(self)

    monkeypatch.setattr(sampler_mod.Sampler, "__init__", spy)
    out = tmp_path / "rec.jsonl"
    assert cli.main(["record", "-o", str(out), "--duration", "2.5", "--interval", "0.1"]) == 0
    assert len(built) == 1 and built[0].recorder is not None and built[0].scanner is not None
    assert fake_card[0].record == str(out) and fake_card[0].engine_discovery is False
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["format"].startswith("gpu-memory-trace/1")
    samples = [x for x in lines[1:] if "gpus" in x]
    assert len(samples) >= 5 and samples[-1]["gpus"][0]["used"] == 40 * GiB
    assert any(x.get("event") == "proc" and x.get("pid") == os.getpid() for x in lines[1:])


def test_record_to_an_unwritable_path_is_one_line(fake_card, tmp_path, capsys):
    assert cli.main(["record", "-o", str(tmp_path / "missing" / "x.jsonl"), "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def test_state_keeper_uses_the_samplers_lock_method():
    """The state keeper reads the analysis through `Sampler.holding_analysis`, never the private lock."""
    import inspect

    from oomwatch import run
    from oomwatch.sampler import Sampler
    from oomwatch.sources.replay import ReplaySource

    assert "_lock" not in inspect.getsource(run.StateKeeper) and "_wall_offset" not in inspect.getsource(run)
    cfg = DaemonConfig(replay="example:staircase")
    src = ReplaySource("example:staircase")
    s = Sampler(cfg, src)
    got = threading.Event()
    with s.holding_analysis() as a:
        assert a is s.analyzer
        t = threading.Thread(target=lambda: (s._lock.acquire(), got.set(), s._lock.release()))
        t.start()
        assert not got.wait(0.2)  # the lock is held meanwhile
    t.join(2)
    assert got.is_set()
    assert isinstance(s.wall_offset, float)
    src.close()


def test_sources_satisfy_the_protocol():
    from oomwatch.sources.base import SampleTap, Source
    from oomwatch.sources.engines import EngineSource
    from oomwatch.sources.processes import ProcessScanner
    from oomwatch.sources.replay import ReplaySource

    for s in (NvmlSource(lib=FakeNvml(cards=1)), ReplaySource("example:staircase"), ProcessScanner()):
        assert isinstance(s, Source), type(s).__name__
        s.close()
    e = EngineSource("http://127.0.0.1:1")
    assert isinstance(e, Source)
    e.close()
    from oomwatch.commands.plot import PlotTap
    from oomwatch.exporters.plot import Recorder

    assert isinstance(PlotTap(Recorder()), SampleTap)


def test_the_snapshot_reads_the_analysis_without_fallbacks():
    """daemon/snapshot.py reads the Analyzer through its typed public attributes: a renamed field fails mypy
    (tests/test_tooling.py) instead of exporting an empty value through a `getattr` default."""
    import inspect

    from oomwatch import snapshot

    src = inspect.getsource(snapshot)
    assert "getattr(" not in src and "hasattr(" not in src
    assert "def build(\n    analyzer: Analyzer," in src
