"""The wheel as a user installs it into an inference server's environment: one import package, `oomwatch`.

The folders are daemon/ and exporters/ (the design's layout); setuptools maps them onto `oomwatch` and
`oomwatch.exporters`. The server's environment may hold anything, python-daemon's `daemon` among them
(a dependency of many services): installing oomwatch beside it must shadow nothing, and both must import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A real build, as `pip install .` makes it (pip's isolated build), from a copy of the tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for folder in ("daemon", "exporters"):
        shutil.copytree(os.path.join(ROOT, folder), src / folder, ignore=ignore)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "w"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return next((tmp / "w").glob("oomwatch-*.whl"))


def _install(target, *what, index=False):
    args = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *what]
    if not index:
        args[4:4] = ["--no-deps", "--no-index"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_the_wheel_adds_only_oomwatch_and_its_start_hook(wheel, tmp_path):
    r = _install(tmp_path, str(wheel))
    assert r.returncode == 0, r.stderr
    top = sorted(p.name for p in tmp_path.iterdir() if p.name != "bin")
    assert [n for n in top if not n.endswith(".dist-info")] == ["oomwatch", "oomwatch-probe.pth"]
    assert os.path.isdir(tmp_path / "oomwatch" / "exporters")
    assert os.path.isfile(tmp_path / "oomwatch" / "examples" / "staircase.jsonl")


def test_beside_python_daemon_both_import(wheel, tmp_path):
    site = tmp_path / "site"
    r = _install(site, "python-daemon>=3", index=True)
    if r.returncode != 0:
        pytest.skip("python-daemon could not be installed from the package index: " + r.stderr.strip()[-300:])
    r = _install(site, str(wheel))
    assert r.returncode == 0, r.stderr
    # this venv's site-packages after the scratch one, for oomwatch's own dependencies (numpy, httpx, ...);
    # as a PYTHONPATH entry its .pth files (the editable checkout among them) are not read
    deps = sysconfig.get_paths()["purelib"]
    code = (
        "from daemon import DaemonContext; import oomwatch, oomwatch.cli, oomwatch.exporters.metrics; "
        "print(DaemonContext.__module__, oomwatch.__file__.startswith(sys.argv[1]), oomwatch.__version__)"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path[:0] = sys.argv[1:3]; " + code,
            str(site),
            deps,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    module, ours, version = r.stdout.split()
    assert module == "daemon.daemon" and ours == "True" and version
    r = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path[:0] = sys.argv[1:3]; from oomwatch.cli import main; "
            "sys.argv = ['oomwatch', 'replay', 'example:staircase', '--json']; sys.exit(main())",
            str(site),
            deps,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"GPUOOMImminent"' in r.stdout


def test_a_bare_checkout_hands_its_subprocesses_the_package(tmp_path):
    """The device machine runs the benchmarks from a bare copy of the tree (nothing installed): the scripts'
    subprocesses (`python -m oomwatch record`, replays) must import the same `oomwatch`. Without site-packages
    (`-S`), the first call lays the tree out and every later call still names it."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from bench import srctree; "
        "a = srctree.importable(); b = srctree.pythonpath(); import oomwatch; "
        "print(a); print(b.split(':')[0]); print(oomwatch.__name__)"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, ROOT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, on_path, name = out.stdout.split()
    assert first and first == on_path and first.endswith(os.path.join("build", "srctree")) and name == "oomwatch"
