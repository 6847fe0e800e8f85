"""Real process trees shaped like the inference engines' own, for the process-attribution tests.

Each node is a real `python -c` process that starts its children, reports its PID, and sleeps. A node
carries the title its engine gives it (vLLM and SGLang set it with setproctitle, which changes both
`/proc/PID/comm`, 15 characters, and the command line): the test writes the title to comm and puts it
in argv. A node can be started through `sh -c` (a launch script), in a session of its own (a daemon:
systemd, nohup), and can exit after starting its children (a crashed server whose workers live on).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

_NODE = r"""
import json, os, shlex, subprocess, sys, time
spec, report = json.loads(sys.argv[1]), sys.argv[2]
code, py = os.environ["PROCTREE_CODE"], os.environ["PROCTREE_PY"]  # sys.executable is lost with argv[0]
if sys.argv[-1] == "boot":  # become the titled process (setproctitle's effect: argv[0] and comm)
    os.execv(py, [spec["title"], "-c", code, sys.argv[1], report])
if spec.get("comm"):
    with open("/proc/self/comm", "w") as f:
        f.write(spec["comm"][:15])
for c in spec.get("children", ()):
    argv = [py, "-c", code, json.dumps(c), report, "boot"]
    if c.get("shell"):
        argv = ["sh", "-c", " ".join(map(shlex.quote, argv)) + "; :"]
    subprocess.Popen(argv, start_new_session=bool(c.get("session")))
with open(report, "a") as f:
    f.write(f"{spec['tag']} {os.getpid()}\n")
if spec.get("exit"):
    sys.exit(0)
time.sleep(spec.get("sleep", 60))
"""


@dataclass
class Node:
    tag: str
    title: str = "python3"  # argv[0] as the engine sets it
    comm: str | None = None  # /proc/PID/comm as setproctitle sets it (None: the interpreter's)
    children: list[Node] = field(default_factory=list)
    shell: bool = False  # started by `sh -c "...; :"` (sh stays the parent)
    session: bool = False  # started in its own session (pgid == pid), like a daemon
    exit: bool = False  # exits once its children are started (they are re-parented)

    def spec(self) -> dict:
        return {
            "tag": self.tag,
            "title": self.title,
            "comm": self.comm,
            "shell": self.shell,
            "session": self.session,
            "exit": self.exit,
            "children": [c.spec() for c in self.children],
        }

    def count(self) -> int:
        return 1 + sum(c.count() for c in self.children)


class Tree:
    """A running tree: `pids[tag]`; `kill()` ends every process it started (by PID)."""

    def __init__(self, root: Node, timeout_s: float = 10.0):
        fd, self.report = tempfile.mkstemp(prefix="proctree-", suffix=".txt")
        os.close(fd)
        argv = [sys.executable, "-c", _NODE, json.dumps(root.spec()), self.report, "boot"]
        if root.shell:
            import shlex

            argv = ["sh", "-c", " ".join(map(shlex.quote, argv)) + "; :"]
        env = {**os.environ, "PROCTREE_CODE": _NODE, "PROCTREE_PY": sys.executable}
        self.proc = subprocess.Popen(argv, start_new_session=root.session, env=env)
        self.pids: dict[str, int] = {}
        n = root.count()
        deadline = time.monotonic() + timeout_s
        while len(self.pids) < n and time.monotonic() < deadline:
            with open(self.report) as f:
                self.pids = {t: int(p) for t, p in (ln.split() for ln in f if ln.strip())}
            time.sleep(0.05)
        if len(self.pids) < n:
            self.kill()
            raise RuntimeError(f"tree did not start: {self.pids}")
        self.exited = {t for t in _tags_exiting(root)}
        self.wait_exited()

    def wait_exited(self, timeout_s: float = 10.0) -> None:
        import psutil

        deadline = time.monotonic() + timeout_s
        for tag in self.exited:
            pid = self.pids[tag]
            while time.monotonic() < deadline:
                try:
                    if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.05)
        # children of an exited node are re-parented a moment later
        time.sleep(0.2)

    def kill(self) -> None:
        import psutil

        for pid in list(self.pids.values()) + [self.proc.pid]:
            try:
                p = psutil.Process(pid)
                kids = p.children(recursive=True)
                for q in [p, *kids]:
                    q.kill()
            except psutil.Error:
                pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            os.unlink(self.report)


def _tags_exiting(n: Node):
    if n.exit:
        yield n.tag
    for c in n.children:
        yield from _tags_exiting(c)
