"""The allocator probe on a real GPU: record two look-alike curves and measure the probe's cost.

    python bench/gpu_probe.py --out DIR            # on a machine with an NVIDIA GPU, torch and nvidia-ml-py
    python bench/gpu_probe.py --out DIR --fake     # anywhere: a fake torch and a fake NVML play the same script

Two workloads of BEHAVIOURS.md, each a separate torch process running the probe (`oomwatch.probe`), while
this process samples NVML at 10 Hz and reads the probe directory every second (`AllocatorSource`), writing
one `gpu-memory-trace/1` per workload with `alloc` lines:
- `cache_growth`: a server-like start (weights, KV pool), then requests whose activations (64 MB-1.5 GB,
  two at a time) are freed into PyTorch's cache: NVML climbs in steps, live tensors stay flat. Healthy.
- `warm_cache_leak`: the same start, the cache warmed by requests, then 60 MB/s of tensors kept forever
  while requests go on, until a real CUDA out-of-memory. NVML sees nothing until the cache is used up.
Phases go in as annotation lines (`event`), which replay never reads. Then the probe's cost on real torch:
CPU seconds per tick with one initialised device. Results: DIR/*.jsonl traces and DIR/gpu_probe.json.
Detection times are measured afterwards by replaying the traces with and without their `alloc` lines
(bench/probe_cost.py --detect DIR).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.srctree import importable, pythonpath  # noqa: E402

importable()  # the device machine runs a bare copy of the tree
MB = 1_000_000
GiB = 1 << 30


# ---- the workload (a child process) ----------------------------------------------------------------
class FakeTorch:
    """A caching allocator in miniature on a fake card, for a run without a GPU: blocks freed stay
    reserved; a request takes the smallest cached block that fits (whole, no splitting); when none fits and
    the card is full the cache is flushed and the request retried (num_alloc_retries), then OOM. The card's
    used bytes are written to `nvml_file` for the fake NVML."""

    class OutOfMemoryError(RuntimeError):
        pass

    def __init__(self, total: int, nvml_file: str):
        import types

        self.total, self.nvml_file = total, nvml_file
        self.allocated = self.reserved = 0
        self.cache: list[int] = []
        self.retries = self.ooms = 0
        self._init = False
        outer = self
        self.cuda = types.SimpleNamespace(
            is_initialized=lambda: outer._init,
            is_available=lambda: True,
            device_count=lambda: 1,
            memory_stats=lambda i=0: outer.stats(),
            get_device_properties=lambda i: types.SimpleNamespace(uuid="fake-0000-0000"),
            mem_get_info=lambda i=0: (outer.total - outer.reserved, outer.total),
            OutOfMemoryError=FakeTorch.OutOfMemoryError,
        )

    def stats(self):
        return {
            "allocated_bytes.all.current": self.allocated,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.reserved,
            "active_bytes.all.current": self.allocated,
            "inactive_split_bytes.all.current": 0,
            "num_alloc_retries": self.retries,
            "num_ooms": self.ooms,
        }

    def _sync(self):
        with open(self.nvml_file + ".tmp", "w") as f:
            f.write(str(self.reserved + 500 * MB))
        os.replace(self.nvml_file + ".tmp", self.nvml_file)

    def empty(self, n: int):
        self._init = True
        fit = sorted(b for b in self.cache if b >= n)
        if fit:
            self.cache.remove(fit[0])
            self.allocated += fit[0]
            return fit[0]
        if self.reserved + n > self.total - 500 * MB:
            if self.cache:
                self.retries += 1
                self.reserved -= sum(self.cache)
                self.cache.clear()
            if self.reserved + n > self.total - 500 * MB:
                self.ooms += 1
                raise FakeTorch.OutOfMemoryError(f"fake CUDA out of memory asking {n}")
        self.reserved += n
        self.allocated += n
        self._sync()
        return n

    def free(self, block: int):
        self.allocated -= block
        self.cache.append(block)


class Card:
    """The workload's view of memory: real torch tensors, or the fake allocator's blocks."""

    def __init__(self, fake_dir: str | None):
        if fake_dir:
            self.t = FakeTorch(int(140.4 * GiB), os.path.join(fake_dir, "nvml"))
            sys.modules["torch"] = self.t  # the probe finds it where it finds torch
            self.OOM = FakeTorch.OutOfMemoryError
        else:
            import torch

            self.t = torch
            self.OOM = torch.cuda.OutOfMemoryError
            torch.cuda.init()
            torch.empty(1, device="cuda")

    def alloc(self, n: int):
        if isinstance(self.t, FakeTorch):
            return self.t.empty(n)
        return self.t.empty(n, dtype=self.t.uint8, device="cuda")

    def free(self, x) -> None:
        if isinstance(self.t, FakeTorch):
            self.t.free(x)
        # real torch: dropping the last reference frees the block into the cache

    def free_bytes(self) -> int:
        return int(self.t.cuda.mem_get_info(0)[0])


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def event(name: str, **kw) -> None:
    print(json.dumps({"event": name, "wall": time.time(), **kw}), flush=True)


def serve(
    card: Card,
    seconds: float,
    rng: random.Random,
    top: float,
    held: list,
    leak_mb_s: float = 0.0,
    keep: list | None = None,
    until_oom: bool = False,
) -> bool:
    """Requests two at a time; activations of 64 MB up to `top` bytes, held 0.1-0.4 s, then freed into the
    cache. With `leak_mb_s`, tensors of that rate are kept forever. Returns True on a real OOM."""
    t_end = time.time() + seconds
    next_leak = time.time()
    sizes = [64 * MB, 128 * MB, 256 * MB, 512 * MB, 768 * MB, 1024 * MB, int(top)]
    while time.time() < t_end:
        try:
            a = card.alloc(rng.choice(sizes))
            b = card.alloc(rng.choice(sizes))
            time.sleep(rng.uniform(0.1, 0.4))
            card.free(a)
            card.free(b)
            del a, b
            while leak_mb_s and time.time() >= next_leak:
                keep.append(card.alloc(int(leak_mb_s * MB / 4)))
                next_leak += 0.25
        except card.OOM as e:
            event("oom", error=str(e).splitlines()[0][:200], kept_bytes=int(len(keep or ()) * leak_mb_s * MB / 4))
            return True
        time.sleep(0.05)
    if until_oom:
        event("no_oom")
    return False


def workload(pattern: str, fake_dir: str | None, seed: int, scale: float = 1.0, leak_mb_s: float = 60.0) -> int:
    from oomwatch import probe

    card = Card(fake_dir)
    p = probe.start()
    event("start", probe=bool(p), pid=os.getpid())
    rng = random.Random(seed)
    held = []
    free = card.free_bytes()
    # A server-like start: weights in 5 shards, then the KV pool in one allocation.
    for _ in range(5):
        held.append(card.alloc(int(0.03 * free)))
        time.sleep(0.6)
    event("weights_loaded")
    left = 10 * GiB if pattern == "cache_growth" else 8 * GiB
    held.append(card.alloc(card.free_bytes() - left))
    event("kv_pool", free_bytes=card.free_bytes())
    time.sleep(3)
    event("serving")
    if pattern == "cache_growth":
        serve(card, 70 * scale, rng, 1.5e9, held)
        event("done")
        return 0
    serve(card, 25 * scale, rng, 1.5e9, held)  # warms the cache
    keep: list = []
    event("leak_start", rate_bytes_per_second=leak_mb_s * MB)
    serve(card, 240, rng, 1.5e9, held, leak_mb_s=leak_mb_s, keep=keep, until_oom=True)
    event("done")
    return 0


# ---- the recorder (this process) --------------------------------------------------------------------
class FakeNvml:
    def __init__(self, fake_dir: str):
        self.path = os.path.join(fake_dir, "nvml")
        self.gpus = [{"index": 0, "name": "Fake H200", "uuid": "GPU-fake-0000-0000", "total": int(140.4 * GiB)}]

    def read(self, pid):
        try:
            used = int(_read(self.path))
        except (OSError, ValueError):
            used = 0
        total = self.gpus[0]["total"]
        return [
            {
                "i": 0,
                "used": used,
                "free": total - used,
                "reserved": 0,
                "util": 0,
                "procs": [[pid, used]] if used else [],
            }
        ]


class RealNvml:
    def __init__(self):
        import pynvml as nv

        self.nv = nv
        nv.nvmlInit()
        self.h = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        self.gpus = []
        for i, h in enumerate(self.h):
            uuid = nv.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            name = nv.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            total = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            self.gpus.append({"index": i, "name": name, "uuid": uuid, "total": total})
        self.driver = nv.nvmlSystemGetDriverVersion()

    def read(self, pid):
        nv = self.nv
        out = []
        for i, h in enumerate(self.h):
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2)
                reserved = int(m.reserved)
            except Exception:  # noqa: BLE001 - a driver without v2
                m = nv.nvmlDeviceGetMemoryInfo(h)
                reserved = 0
            procs = [[p.pid, p.usedGpuMemory] for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
            out.append(
                {
                    "i": i,
                    "used": int(m.used),
                    "free": int(m.free),
                    "reserved": reserved,
                    "util": int(nv.nvmlDeviceGetUtilizationRates(h).gpu),
                    "procs": procs,
                }
            )
        return out


def record(pattern: str, out: str, fake: bool, seed: int, scale: float = 1.0, leak_mb_s: float = 60.0) -> dict:
    from oomwatch.model import GpuInfo
    from oomwatch.sources.allocator import AllocatorSource
    from oomwatch.trace import alloc_line

    probe_dir = tempfile.mkdtemp(prefix="probe-")
    fake_dir = tempfile.mkdtemp(prefix="fakegpu-") if fake else None
    nvml = FakeNvml(fake_dir) if fake else RealNvml()
    src = AllocatorSource([GpuInfo(g["index"], g["name"], g["uuid"], g["total"]) for g in nvml.gpus], probe_dir)
    if fake:  # the fake torch's UUID, in NVML's spelling
        src._by_uuid["GPU-fake-0000-0000"] = src._by_uuid.pop(nvml.gpus[0]["uuid"])
    env = dict(
        os.environ, OOMWATCH_PROBE="1", OOMWATCH_PROBE_DIR=probe_dir, PYTHONPATH=pythonpath(), PYTHONUNBUFFERED="1"
    )
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--workload",
        pattern,
        "--seed",
        str(seed),
        "--scale",
        str(scale),
        "--leak-mb-s",
        str(leak_mb_s),
    ]
    if fake_dir:
        cmd += ["--fake-dir", fake_dir]
    path = os.path.join(out, f"probe_{pattern}.jsonl")
    f = open(path, "w")  # noqa: SIM115 - held open for the whole recording, closed below
    f.write(
        json.dumps(
            {
                "format": "gpu-memory-trace/1",
                "sample_hz": 10.0,
                "driver": getattr(nvml, "driver", None),
                "gpus": nvml.gpus,
                "scenario": f"probe_{pattern}",
                "note": "bench/gpu_probe.py: torch workload with the allocator probe",
            }
        )
        + "\n"
    )
    t0 = time.time()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    os.set_blocking(child.stdout.fileno(), False)
    events, described, next_alloc, buf = [], False, t0, ""
    alloc_lines = 0
    last_raw = None
    while True:
        now = time.time()
        try:
            chunk = child.stdout.read() or ""
        except (BlockingIOError, TypeError):
            chunk = ""
        buf += chunk
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            events.append(ev)
            f.write(
                json.dumps(
                    {
                        "t": round(ev["wall"] - t0, 3),
                        "event": "phase" if ev["event"] not in ("oom",) else "oom",
                        "phase": ev["event"],
                        **{k: v for k, v in ev.items() if k not in ("event", "wall")},
                    }
                )
                + "\n"
            )
        gpus = nvml.read(child.pid)
        if not described and any(p[0] == child.pid for g in gpus for p in g["procs"]):
            f.write(
                json.dumps(
                    {
                        "t": round(now - t0, 3),
                        "event": "proc",
                        "pid": child.pid,
                        "name": "python3",
                        "cmdline": ["python3", "gpu_probe.py", "--workload", pattern],
                        "ppid": os.getpid(),
                        "create_time": t0,
                        "username": "bench",
                        "libtorch_cuda": True,
                        "libcudart": True,
                    }
                )
                + "\n"
            )
            described = True
        f.write(json.dumps({"t": round(now - t0, 3), "gpus": gpus}) + "\n")
        if now >= next_alloc:
            alloc = src.poll(now - t0)
            for fn in os.listdir(probe_dir):
                if fn.endswith(".json") and not fn.startswith("."):
                    with contextlib.suppress(OSError):
                        last_raw = _read(os.path.join(probe_dir, fn))
            if alloc:
                f.write(alloc_line(round(now - t0, 3), alloc) + "\n")  # the daemon's own writer
                alloc_lines += 1
            next_alloc += 1.0
        if child.poll() is not None:
            break
        time.sleep(max(0.0, 0.1 - (time.time() - now)))
    err = child.stderr.read()
    f.close()
    return {
        "pattern": pattern,
        "trace": os.path.basename(path),
        "seconds": round(time.time() - t0, 1),
        "exit": child.returncode,
        "alloc_lines": alloc_lines,
        "events": events,
        "last_probe_file": last_raw,
        "stderr_tail": err[-1500:],
    }


# ---- the probe's cost on real torch ------------------------------------------------------------------
def cost(fake: bool, n: int = 3000) -> dict:
    from oomwatch.probe import Probe

    d = tempfile.mkdtemp(prefix="probecost-")
    if fake:
        card = Card(tempfile.mkdtemp())
        card.alloc(GiB)
        torch = card.t
    else:
        import torch

        x = torch.empty(GiB, dtype=torch.uint8, device="cuda")  # noqa: F841 - a device in use
    p = Probe(d, 1.0)
    p.check_directory()
    for _ in range(20):
        p.tick()
    t_cpu, t_wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        p.tick()
    cpu = (time.process_time() - t_cpu) / n
    wall = (time.perf_counter() - t_wall) / n
    ms = []
    for _ in range(200):
        a = time.perf_counter()
        p.tick()
        ms.append(time.perf_counter() - a)
    ms.sort()
    doc = json.loads(_read(p.path()))
    return {
        "torch": getattr(torch, "__version__", "fake"),
        "ticks": n,
        "cpu_seconds_per_tick": cpu,
        "wall_seconds_per_tick": wall,
        "wall_median_s": ms[len(ms) // 2],
        "wall_p99_s": ms[int(len(ms) * 0.99)],
        "core_fraction_at_1hz": cpu / 1.0,
        "file": doc,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--fake", action="store_true", help="a fake torch and NVML (no GPU needed)")
    ap.add_argument("--only", choices=["cache_growth", "warm_cache_leak", "cost"], action="append")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0, help="stretch or shrink the serving phases")
    ap.add_argument("--leak-mb-s", type=float, default=60.0, help="the leak's rate (MB/s)")
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--fake-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.workload:
        return workload(a.workload, a.fake_dir, a.seed, a.scale, a.leak_mb_s)
    os.makedirs(a.out, exist_ok=True)
    res: dict = {"fake": a.fake, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for what in a.only or ["cost", "cache_growth", "warm_cache_leak"]:
        t = time.time()
        res[what] = cost(a.fake) if what == "cost" else record(what, a.out, a.fake, a.seed, a.scale, a.leak_mb_s)
        print(f"{what}: {time.time() - t:.1f} s", json.dumps(res[what])[:600], flush=True)
    with open(os.path.join(a.out, "gpu_probe.json" if not a.fake else "gpu_probe_fake.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
