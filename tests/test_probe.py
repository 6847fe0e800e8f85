"""The in-process allocator probe (daemon/probe/) against a fake torch injected into sys.modules.

The fake stands for what cannot run here (a CUDA device); everything else is real: the thread, the files,
fork, the .pth start hook in a fresh interpreter, and the cost of `import oomwatch.probe`.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
import types

import pytest

from conftest import ROOT

FAKE_TORCH = textwrap.dedent("""
    import types
    class _Props:
        uuid = "25fc3e73-c1a6-57a5-6d92-4d50ac1b29fa"
    class _Cuda:
        def __init__(self):
            self.initialized = False
            self.available = True
            self.stats = {0: {}, 1: {}}
            self.calls = []
        def is_initialized(self):
            return self.initialized
        def is_available(self):
            return self.available
        def device_count(self):
            return len(self.stats)
        def memory_stats(self, i):
            self.calls.append(("memory_stats", i))
            return dict(self.stats[i])
        def get_device_properties(self, i):
            self.calls.append(("get_device_properties", i))
            return _Props()
        def init(self):
            raise AssertionError("the probe must never initialise CUDA")
        def _lazy_init(self):
            raise AssertionError("the probe must never initialise CUDA")
    cuda = _Cuda()
    __version__ = "fake"
""")


def stats(allocated, reserved, retries=0, ooms=0, split=0):
    return {
        "allocated_bytes.all.current": allocated,
        "reserved_bytes.all.current": reserved,
        "reserved_bytes.all.peak": reserved,
        "active_bytes.all.current": allocated,
        "inactive_split_bytes.all.current": split,
        "num_alloc_retries": retries,
        "num_ooms": ooms,
    }


@pytest.fixture
def fake_torch(monkeypatch):
    mod = types.ModuleType("torch")
    exec(FAKE_TORCH, mod.__dict__)
    monkeypatch.setitem(sys.modules, "torch", mod)
    return mod


@pytest.fixture
def probe_mod():
    from oomwatch import probe

    yield probe
    probe.stop()


def read(path):
    with open(path) as f:
        return json.load(f)


def test_no_cuda_initialised_writes_no_device_and_touches_nothing(fake_torch, probe_mod, tmp_path, caplog):
    p = probe_mod.Probe(str(tmp_path), 1.0)
    assert p.check_directory()
    assert p.tick()
    doc = read(p.path())
    assert doc["format"] == "oomwatch-probe/1" and doc["pid"] == os.getpid() and doc["devices"] == []
    assert fake_torch.cuda.calls == []  # not even memory_stats before CUDA is initialised
    assert any("no CUDA device in use" in r.getMessage() for r in caplog.records)


def test_reports_only_devices_in_use_with_nvml_uuid(fake_torch, probe_mod, tmp_path):
    cuda = fake_torch.cuda
    cuda.initialized = True
    cuda.stats[0] = stats(0, 0)  # initialised runtime, but this process never put memory on device 0
    cuda.stats[1] = stats(6 << 30, 8 << 30, retries=2, ooms=1, split=1 << 20)
    p = probe_mod.Probe(str(tmp_path), 0.5)
    assert p.tick()
    doc = read(p.path())
    assert doc["interval_s"] == 0.5 and abs(doc["time"] - time.time()) < 5
    assert doc["devices"] == [
        {
            "uuid": "GPU-25fc3e73-c1a6-57a5-6d92-4d50ac1b29fa",
            "index": 1,
            "allocated_bytes": 6 << 30,
            "reserved_bytes": 8 << 30,
            "active_bytes": 6 << 30,
            "inactive_split_bytes": 1 << 20,
            "alloc_retries": 2,
            "ooms": 1,
        }
    ]
    assert ("get_device_properties", 0) not in cuda.calls
    p.tick()
    assert cuda.calls.count(("get_device_properties", 1)) == 1  # cached after the first read
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temp file left behind


def test_a_failing_torch_never_raises_into_the_host(fake_torch, probe_mod, tmp_path, caplog):
    fake_torch.cuda.initialized = True

    def boom(i):
        raise RuntimeError("driver went away")

    fake_torch.cuda.memory_stats = boom
    p = probe_mod.Probe(str(tmp_path), 1.0)
    assert p.tick() is False and p.tick() is False
    said = [r.getMessage() for r in caplog.records if "driver went away" in r.getMessage()]
    assert len(said) == 1  # logged once per kind of failure


def test_missing_or_unwritable_directory_disables_with_one_line(fake_torch, probe_mod, tmp_path, caplog):
    assert probe_mod.start(str(tmp_path / "absent"), 0.05) is None
    lines = [r.getMessage() for r in caplog.records if "probe disabled" in r.getMessage()]
    assert len(lines) == 1 and "does not exist" in lines[0]
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        p = probe_mod.Probe(str(ro), 1.0)
        assert not p.check_directory() and "not writable" in p.disabled


def test_thread_writes_every_interval_and_stop_removes_the_file(fake_torch, probe_mod, tmp_path):
    fake_torch.cuda.initialized = True
    fake_torch.cuda.stats[0] = stats(1 << 30, 2 << 30)
    p = probe_mod.start(str(tmp_path), 0.05)
    assert p is not None and probe_mod.start(str(tmp_path), 0.05) is p  # idempotent
    deadline = time.time() + 5
    while p.ticks < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert p.ticks >= 3
    first = read(p.path())["time"]
    time.sleep(0.2)
    assert read(p.path())["time"] > first
    probe_mod.stop()
    assert not os.path.exists(p.path())


def test_a_forked_child_writes_its_own_file(tmp_path):
    code = textwrap.dedent(f"""
        import os, sys, time, types
        mod = types.ModuleType("torch"); exec({FAKE_TORCH!r}, mod.__dict__); sys.modules["torch"] = mod
        from oomwatch import probe
        p = probe.start({str(tmp_path)!r}, 0.05)
        pid = os.fork()
        if pid == 0:
            time.sleep(0.5)
            q = probe.current()
            os._exit(0 if q is not None and q.pid == os.getpid() and q.ticks >= 2
                     and os.path.exists(os.path.join({str(tmp_path)!r}, f"{{os.getpid()}}.json")) else 3)
        _, status = os.waitpid(pid, 0)
        print(pid, os.waitstatus_to_exitcode(status), p.pid == os.getpid())
    """)
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    child, code_, parent_ok = r.stdout.split()
    assert code_ == "0" and parent_ok == "True"


def test_importing_the_probe_loads_nothing_of_the_daemon():
    code = (
        "import sys, oomwatch.probe, oomwatch.probe.autostart, oomwatch.probe.vllm; "
        "print(sorted(m for m in sys.modules if m.startswith(('numpy', 'oomwatch', 'prometheus', 'psutil'))))"
    )
    r = _run_python(code, {"OOMWATCH_PROBE": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['oomwatch', 'oomwatch.probe', 'oomwatch.probe.autostart', 'oomwatch.probe.vllm']"
    # ... while the package's public names still resolve (PEP 562)
    r = _run_python("import oomwatch; print(oomwatch.Analyzer.__name__, oomwatch.Sample.__name__)", timeout=60)
    assert r.stdout.split() == ["Analyzer", "Sample"], r.stderr


def _pth_site(tmp_path):
    """A site directory holding the project's .pth line, processed as site-packages would (site.addsitedir)."""
    site = tmp_path / "site"
    site.mkdir()
    with open(os.path.join(ROOT, "daemon", "probe", "oomwatch-probe.pth")) as f:
        (site / "oomwatch-probe.pth").write_text(f.read())
    return site


def _run_python(code, env=None, timeout=30):
    """Run Python code in a child with this checkout on its path (and `env` added to its environment)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def _run_with_pth(site, body, env):
    return _run_python(f"import site; site.addsitedir({str(site)!r})\n" + textwrap.dedent(body), env)


def test_pth_hook_costs_nothing_when_unset(tmp_path):
    site = _pth_site(tmp_path)
    code = "import sys; print('oomwatch.probe' in sys.modules, [type(f).__name__ for f in sys.meta_path])"
    r = _run_with_pth(site, code, {"OOMWATCH_PROBE": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("False") and "TorchWatch" not in r.stdout


def test_pth_hook_starts_the_probe_once_torch_is_imported(tmp_path):
    site = _pth_site(tmp_path)
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir()
    torch_dir = tmp_path / "fake_torch_pkg"
    torch_dir.mkdir()
    (torch_dir / "torch.py").write_text(FAKE_TORCH)
    body = f"""
        import os, sys, time, threading
        sys.path.insert(0, {str(torch_dir)!r})
        before = [t.name for t in threading.enumerate()]
        time.sleep(0.3)
        nothing_yet = os.listdir({str(probe_dir)!r})
        import torch
        torch.cuda.initialized = True
        torch.cuda.stats[0] = {{"reserved_bytes.all.current": 5, "allocated_bytes.all.current": 3}}
        time.sleep(0.5)
        print("oomwatch-probe" in before, nothing_yet, sorted(os.listdir({str(probe_dir)!r})),
              [type(f).__name__ for f in sys.meta_path].count("TorchWatch"))
    """
    r = _run_with_pth(
        site, body, {"OOMWATCH_PROBE": "1", "OOMWATCH_PROBE_DIR": str(probe_dir), "OOMWATCH_PROBE_INTERVAL": "0.1"}
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("False [] ["), out  # no thread and no file before torch
    assert out.endswith("] 0"), out  # the finder removed itself
    assert ".json'" in out  # a probe file after torch was imported


def test_vllm_plugin_entry_is_gated(fake_torch, probe_mod, tmp_path, monkeypatch):
    from oomwatch.probe import vllm as plugin

    monkeypatch.setenv("OOMWATCH_PROBE_DIR", str(tmp_path))
    monkeypatch.delenv("OOMWATCH_PROBE", raising=False)
    plugin.register()
    assert probe_mod.current() is None
    monkeypatch.setenv("OOMWATCH_PROBE", "1")
    plugin.register()
    assert probe_mod.current() is not None and probe_mod.current().directory == str(tmp_path)


def test_entry_point_and_pth_are_declared():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pp = tomllib.load(f)
    assert pp["project"]["entry-points"]["vllm.general_plugins"]["oomwatch_probe"] == "oomwatch.probe.vllm:register"
    assert "oomwatch.probe" in pp["tool"]["setuptools"]["packages"]


@pytest.mark.slow
def test_the_wheel_installs_the_pth_into_site_packages_and_it_works(tmp_path):
    """A real build (pip's isolated build, as `pip install .` does) and install into a scratch venv."""
    import shutil

    src = tmp_path / "src"  # a copy: pip builds in the source tree, and this one is left as it was
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    for pkg in ("daemon", "exporters"):
        shutil.copytree(os.path.join(ROOT, pkg), src / pkg, ignore=ignore)
    wheels = tmp_path / "wheels"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        pytest.fail(r.stderr[-2000:])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    site_dir = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    whl = next(wheels.glob("oomwatch-*.whl"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site_dir, str(whl)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(site_dir, "oomwatch-probe.pth"))
    torch_dir = tmp_path / "t"
    torch_dir.mkdir()
    (torch_dir / "torch.py").write_text(
        FAKE_TORCH + "\ncuda.initialized = True\ncuda.stats[0] = "
        "{'reserved_bytes.all.current': 7, 'allocated_bytes.all.current': 5}\n"
    )
    probes = tmp_path / "probes"
    probes.mkdir()
    code = (
        "import os, sys, time; loaded = 'oomwatch.probe' in sys.modules; import torch; time.sleep(0.5); "
        f"print(loaded, os.listdir({str(probes)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [py, "-c", code],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(
            env,
            PYTHONPATH=str(torch_dir),
            OOMWATCH_PROBE="1",
            OOMWATCH_PROBE_DIR=str(probes),
            OOMWATCH_PROBE_INTERVAL="0.1",
        ),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("True [") and ".json'" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(
        [py, "-c", "import sys; print('oomwatch' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(env, OOMWATCH_PROBE=""),
    )
    assert r.stdout.strip() == "False"  # unset: the .pth line imports nothing
