"""Real inference in oomwatch's own recordings: a 7B-shaped transformers server on a real GPU.

    python3 bench/gpu_serve.py --out DIR [--only a,b,c,d] [--budget-s S]   # a machine with an NVIDIA GPU,
                                                                         # torch and transformers
    python3 bench/gpu_serve.py --smoke                                   # versions and API introspection

`oomwatch record` needs APScheduler; where the machine has none, install its wheels first (`pip download
--no-deps -d build/wheels apscheduler tzlocal` here, then there `pip install --no-deps --target DIR
build/wheels/*.whl` and `PYTHONPATH=DIR`).

Each scenario is a separate server process: transformers serving a Qwen2-7B-shaped model (hidden 3584, 28
layers, 28 heads, 4 KV heads, intermediate 18944, vocab 152064, bf16) built from its config with random
weights (`AutoModelForCausalLM.from_config`, no download), fed a long-tailed request stream (prompt lengths
log-normal, median ~600 tokens, up to 8192; 8-192 new tokens). The allocator probe runs inside it
(`oomwatch.probe.start()`, OOMWATCH_PROBE=1, its own OOMWATCH_PROBE_DIR). `oomwatch record -o TRACE
--interval 0.1` (NVML at 10 Hz, process descriptions, RSS) records the card from before the server starts
until after it exits. `oomwatch record` writes no `alloc` lines, so this script reads the probe directory
once a second with the daemon's own reader (`oomwatch.sources.allocator.AllocatorSource`, written with
`oomwatch.trace.alloc_line`) and merges those lines into the trace afterwards, as bench/gpu_probe.py did.
- a `generate`: healthy `generate()` serving, static batches of up to 8 requests (16384 padded tokens),
  a dynamic KV cache: memory follows the largest batch, the allocator's cache grows and levels off.
- b `cb`: healthy continuous batching (`generate_batch`, a new manager per call: its paged pool is taken
  and given back around every batch).
- c `leak`: `generate()` serving as in a, on a card pre-filled by a 'weights' tensor; after a warm-up the
  app keeps every k-th batch's `generate()` output (past_key_values and logits) in a list, until a real CUDA
  OutOfMemoryError (k chosen from the warm-up's output bytes per second so the OOM comes in ~2 minutes).
- d `swap`: healthy `generate()` serving, then a model hot-swap: a second model is built while the first is
  still resident, both serve-ready for ~30 s, then the first is freed (`empty_cache`).
- e `waves`: a pool-less app whose load comes in waves: each busy spell admits ever larger batches up to a
  peak drawn anew each wave, then a quiet spell frees the cache (`empty_cache`): climbs of different
  heights, each given back.
- f `waves_leak`: e on a pre-filled card, and from the second wave every k-th batch's logits are kept, until
  a real CUDA OOM: troughs that rise under a load that comes and goes.
- g `ramp`: a pool-less generate() app on a pre-filled card whose load ramps up (the padded-token budget of
  its static batches grows from 2k to a peak over 70% of the run, then holds): the allocator's cache
  climbs with every larger batch toward the top of the card and levels off at the peak. Healthy: a first
  climb no earlier climb can vouch for.
- h `lora`: generate() serving with LoRA adapters (rank 64 on the seven projections of every layer, ~0.32 GB
  each, applied by forward hooks): each batch asks for one of 12 adapters, loaded on first use into an LRU of
  8 (an evicted adapter's blocks are reused by the next one). Healthy: a staircase that stops at 8 adapters.
- i `lora_leak`: h on a pre-filled card, after a warm-up on one adapter, with an adapter cache that has no
  cap: each batch brings a new adapter and none is evicted, until a real CUDA OOM (a steady staircase).
- j `full`: a as a small card's server at 95% would serve: the card pre-filled to a few GB free, batches
  of up to 4 requests (8k padded tokens) that fit there; the allocator's cache fills most of what is left
  and levels off near the top. Healthy: a card at 97-99% that must not page.
- k `full_leak`: j, and after a warm-up every k-th batch's output is kept (megabytes a second), until a real
  CUDA OOM minutes later: a slow leak into the last few GB, where the cache it carves from hides its start.
- l `full_freed`: j, with `torch.cuda.empty_cache()` after every batch: each forward pass is taken and given
  back where NVML sees it, at the top of the card. Healthy: passes of hundreds of MB that must not page.
- m `full_leak_freed`: l, and after a warm-up every k-th batch's output is kept, until a real CUDA OOM: a
  slow leak under forward passes that come and go (the page's envelope is the floor plus the next pass).
- n `sleep`: generate() serving, then sleep and wake three times, as vLLM's sleep mode level 1 does in its own
  process: the weights go to host memory and the cache is given back (`model.to("cpu")`, `empty_cache`), the
  card sits near empty for a while, then the weights come back (`model.to("cuda")`) and serving resumes.
  Healthy: the same process climbs back to a level it held and gave back.
- o `restart_leak`: a crash loop: c's server dies of a real CUDA OOM and a new server process (a new PID)
  starts 5 s later into the same leak, to a second real OOM: two starts and two leaks on one card.
- p `restart`: a rolling update: a's server exits after serving and a new server process starts 5 s later,
  loads the model again and serves. Healthy: a second start beside the history of the first.
The server writes its phases (monotonic clock) to a side file; the script merges them into the trace as
annotations (`phase`, `oom`; header `scenario`, `expect`, `note`), which replay never reads. Then
`oomwatch replay TRACE --json` runs on each trace (as recorded, and with its alloc lines removed) and
DIR/gpu_serve.json keeps the summaries, the alert transitions, the OOM time and the lead.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.srctree import importable, pythonpath  # noqa: E402

importable()  # the device machine runs a bare copy of the tree
PY = sys.executable
GB = 1_000_000_000
GiB = 1 << 30

QWEN2_7B = dict(
    hidden_size=3584,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    intermediate_size=18944,
    vocab_size=152064,
    max_position_embeddings=32768,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    use_sliding_window=False,
)

SCENARIOS = {
    "a": {
        "name": "generate",
        "expect": {"shape": {"0": "stable"}, "leak": False, "oom": False},
        "note": "healthy: transformers generate() with a dynamic KV cache (Qwen2-7B-shaped, random weights, bf16), "
        "static batches of up to 8 long-tailed requests; the allocator's cache follows the largest batch and levels "
        "off",
    },
    "b": {
        "name": "cb",
        "expect": {"shape": {"0": "sawtooth"}, "leak": False, "oom": False},
        "note": "healthy: transformers continuous batching (generate_batch, a new manager per call) on a "
        "Qwen2-7B-shaped model: the paged KV pool is taken and given back around every batch",
    },
    "c": {
        "name": "leak",
        "expect": {"shape": {"0": "staircase"}, "leak": True, "oom": True},
        "note": "generate() serving as in serve_generate on a card pre-filled by a 'weights' tensor; after a warm-up "
        "the app keeps every k-th batch's generate() output (past_key_values + logits) in a list, until a real CUDA "
        "OOM",
    },
    "d": {
        "name": "swap",
        "expect": {"shape": {"0": "stable"}, "leak": False, "oom": False},
        "note": "healthy: generate() serving, then a model hot-swap: a second 7B-shaped model loads while the first is "
        "resident, both stay ~30 s, then the first is freed (gc + torch.cuda.empty_cache())",
    },
    "e": {
        "name": "waves",
        "expect": {"shape": {"0": "sawtooth"}, "leak": False, "oom": False},
        "note": "healthy: a pool-less generate() app whose load comes in waves: each busy spell admits ever larger "
        "static batches (the padded-token budget grows to a peak drawn anew each wave), then a quiet spell in "
        "which the app calls gc + torch.cuda.empty_cache(): memory follows the load, climbs of different heights, "
        "each given back",
    },
    "f": {
        "name": "waves_leak",
        "expect": {"shape": {"0": "sawtooth"}, "leak": True, "oom": True},
        "note": "the waves of serve_waves on a card pre-filled by a 'weights' tensor, and from the second wave the app "
        "keeps every k-th batch's generate() output in a list (freed by no empty_cache), until a real CUDA OOM: "
        "troughs that rise under a load that comes and goes",
    },
    "g": {
        "name": "ramp",
        "expect": {"shape": {"0": ["stable", "spike"]}, "leak": False, "oom": False},
        "note": "healthy: a pool-less generate() app on a card pre-filled by a 'weights' tensor, whose load ramps "
        "up: the padded-token budget of its static batches (up to 16 requests) grows from 2k to a peak over 70% of "
        "the run, then holds; no empty_cache: the allocator's cache climbs with every larger batch toward the top of "
        "the card and levels off at the peak",
    },
    "h": {
        "name": "lora",
        "expect": {"shape": {"0": "stable"}, "leak": False, "oom": False},
        "note": "healthy: generate() serving with LoRA adapters (rank 64 on q/k/v/o/gate/up/down of every layer, "
        "~0.32 GB each, applied by forward hooks): each batch asks for one of 12 adapters, loaded on first use into "
        "an LRU cache of 8; once 8 are loaded an evicted adapter's freed blocks take the next one",
    },
    "i": {
        "name": "lora_leak",
        "expect": {"shape": {"0": "staircase"}, "leak": True, "oom": True},
        "note": "generate() serving with LoRA adapters as in serve_lora, on a card pre-filled by a 'weights' tensor; "
        "after a warm-up on one adapter the adapter cache has no cap: each batch brings a new adapter (~0.32 GB) "
        "and none is ever evicted, until a real CUDA OOM",
    },
    "j": {
        "name": "full",
        "expect": {"shape": {"0": ["stable", "spike"]}, "leak": False, "oom": False},
        "note": "healthy: generate() serving as in serve_generate on a card pre-filled by a 'weights' tensor to a few "
        "GB free, batches of up to 4 requests (8k padded tokens): the allocator's cache takes most of what is left "
        "and levels off near the top of the card",
    },
    "k": {
        "name": "full_leak",
        "expect": {"shape": {"0": ["staircase", "ramp"]}, "leak": True, "oom": True},
        "note": "serve_full's server, and after a warm-up the app keeps every k-th batch's generate() output in a "
        "list (megabytes a second), until a real CUDA OOM minutes later: a slow leak into the last few GB",
    },
    "l": {
        "name": "full_freed",
        "expect": {"shape": {"0": ["stable", "spike", "sawtooth"]}, "leak": False, "oom": False},
        "note": "healthy: serve_full's server (a card pre-filled to a few GB free, batches of up to 4 requests) whose "
        "app calls torch.cuda.empty_cache() after every batch: NVML sees each forward pass taken and given back at "
        "the top of the card",
    },
    "m": {
        "name": "full_leak_freed",
        "expect": {"shape": {"0": ["staircase", "ramp", "sawtooth"]}, "leak": True, "oom": True},
        "note": "serve_full_freed's server, and after a warm-up the app keeps every k-th batch's generate() output in "
        "a list, until a real CUDA OOM minutes later: a slow leak into the last few GB under forward passes that NVML "
        "sees come and go",
    },
    "n": {
        "name": "sleep",
        "expect": {"shape": {"0": ["stable", "spike", "sawtooth"]}, "leak": False, "oom": False},
        "note": "healthy: generate() serving, then three sleep/wake cycles in the same process, as vLLM's sleep mode "
        "level 1: the weights move to host memory and the cache is given back (model.to('cpu'), gc, "
        "torch.cuda.empty_cache()), the card sits near empty, then the weights come back (model.to('cuda')) and "
        "serving resumes",
    },
    "o": {
        "name": "restart_leak",
        "expect": {"shape": {"0": "staircase"}, "leak": True, "oom": True},
        "note": "a crash loop: serve_leak's server (a pre-filled card, every k-th batch's output kept after a warm-up) "
        "dies of a real CUDA OOM, and a new server process starts 5 s later into the same leak, to a second real OOM",
        "runs": 2,
    },
    "p": {
        "name": "restart",
        "expect": {"shape": {"0": "stable"}, "leak": False, "oom": False},
        "note": "healthy: serve_generate's server exits after serving (a rolling update), and a new server process "
        "starts 5 s later on the same card, loads the model again and serves",
        "runs": 2,
    },
}

#: How long a restarted server waits after the last one exited (a supervisor's back-off).
RESTART_BACKOFF_S = 5.0

#: Scenarios served as another's server does, with other flags (j and k: a and c on a nearly full card; l and m:
#: j and k with `empty_cache()` after every batch; o and p: c and a, restarted once as a new process).
SERVES_AS = {"j": "a", "k": "c", "l": "a", "m": "c", "o": "c", "p": "a"}


# =================================================================================================
# The server (a child process)
# =================================================================================================
class Events:
    """The server's side file: one JSON line per phase, OOM or request batch, on the monotonic clock."""

    def __init__(self, path: str):
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the process's life
        self.lock = threading.Lock()

    def write(self, kind: str, **kw) -> None:
        with self.lock:
            self.f.write(json.dumps({"mono": time.monotonic(), "wall": time.time(), "kind": kind, **kw}) + "\n")
            self.f.flush()

    def phase(self, name: str, **kw) -> None:
        self.write("phase", name=name, **kw)
        print(f"[{time.strftime('%H:%M:%S')}] phase {name} {kw if kw else ''}", flush=True)


def tensor_bytes(obj, seen: set | None = None, depth: int = 0) -> int:
    """Bytes of the distinct CUDA storages reachable from `obj` (tensors, tuples, dicts, cache objects)."""
    import torch

    seen = set() if seen is None else seen
    if depth > 6 or obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        if not obj.is_cuda:
            return 0
        st = obj.untyped_storage()
        key = st.data_ptr()
        if key in seen:
            return 0
        seen.add(key)
        return st.nbytes()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x, seen, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x, seen, depth + 1) for x in obj.values())
    if isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    d = getattr(obj, "__dict__", None)
    if d:
        return sum(tensor_bytes(x, seen, depth + 1) for x in d.values())
    return 0


def build_model(torch, attn: str | None = "sdpa"):
    from transformers import AutoModelForCausalLM

    try:
        from transformers import Qwen2Config

        cfg = Qwen2Config(**QWEN2_7B)
    except ImportError:
        from transformers import AutoConfig

        cfg = AutoConfig.for_model("qwen2", **QWEN2_7B)
    kw = {"attn_implementation": attn} if attn else {}
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, **kw)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, **kw)
    model.eval()
    return model


class Stream:
    """Poisson arrivals of long-tailed requests: (prompt tokens, new tokens)."""

    def __init__(self, rng: random.Random, rate: float, t0: float):
        self.rng, self.rate = rng, rate
        self.next = t0 + rng.expovariate(rate)
        self.queue: list[tuple[int, int]] = []

    def one(self) -> tuple[int, int]:
        r = self.rng
        p = int(min(8192, max(16, r.lognormvariate(math.log(600), 1.0))))
        n = int(min(192, max(8, r.lognormvariate(math.log(64), 0.6))))
        return p, n

    def arrive(self, now: float) -> None:
        while self.next <= now:
            self.queue.append(self.one())
            self.next += self.rng.expovariate(self.rate)

    def wait(self) -> None:
        now = time.monotonic()
        self.arrive(now)
        if not self.queue:
            time.sleep(max(0.0, self.next - now))
            self.arrive(time.monotonic())

    def take_static(self, max_n: int = 8, budget: int = 16384) -> list[tuple[int, int]]:
        """A static batch: FIFO, up to `max_n`, padded tokens within `budget` (at least one request)."""
        self.wait()
        batch = [self.queue.pop(0)]
        while self.queue and len(batch) < max_n:
            longest = max(max(p for p, _ in batch), self.queue[0][0])
            if longest * (len(batch) + 1) > budget:
                break
            batch.append(self.queue.pop(0))
        return batch

    def take_all(self, max_n: int = 64) -> list[tuple[int, int]]:
        self.wait()
        batch, self.queue = self.queue[:max_n], self.queue[max_n:]
        return batch


class Lora:
    """LoRA adapters on a transformers model: rank-`rank` A and B on the seven projections of every layer,
    applied by forward hooks (out + (x @ A) @ B) for the adapter in use; loaded on first use into an LRU of
    `cap` adapters (0: no cap, none ever evicted)."""

    NAMES = (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")), ("mlp", ("gate_proj", "up_proj", "down_proj")))

    def __init__(self, torch, model, rank: int = 64, cap: int = 8):
        from collections import OrderedDict

        self.torch, self.rank, self.cap = torch, rank, cap
        self.mods = [
            getattr(getattr(layer, sub), n) for layer in model.model.layers for sub, ns in self.NAMES for n in ns
        ]
        self.adapters: OrderedDict = OrderedDict()
        self.current: list | None = None
        for i, m in enumerate(self.mods):
            m.register_forward_hook(self._hook(i))

    def _hook(self, i: int):
        def apply(mod, inp, out):
            if self.current is None:
                return out
            a, b = self.current[i]
            return out + (inp[0] @ a) @ b

        return apply

    def use(self, aid) -> bool:
        """Serve the next batch with adapter `aid`; True when it had to be loaded now."""
        torch = self.torch
        if aid in self.adapters:
            self.adapters.move_to_end(aid)
            self.current = self.adapters[aid]
            return False
        if self.cap and len(self.adapters) >= self.cap:
            self.adapters.popitem(last=False)  # its blocks go back to the caching allocator
            self.current = None
        kw = dict(dtype=torch.bfloat16, device="cuda")
        self.adapters[aid] = [
            (torch.randn(m.in_features, self.rank, **kw) * 0.01, torch.randn(self.rank, m.out_features, **kw) * 0.001)
            for m in self.mods
        ]
        self.current = self.adapters[aid]
        return True

    @property
    def nbytes(self) -> int:
        return sum(
            a.numel() * a.element_size() + b.numel() * b.element_size() for ad in self.adapters.values() for a, b in ad
        )


class Server:
    def __init__(self, a):
        self.a = a
        self.ev = Events(a.events)
        self.ev.phase("workload_start", pid=os.getpid())
        import torch

        self.torch = torch
        from oomwatch import probe

        self.probe = probe.start()
        self.ev.write("info", probe_started=bool(self.probe), probe_dir=os.environ.get("OOMWATCH_PROBE_DIR"))
        import transformers

        self.transformers = transformers
        if a.no_cudnn_sdpa:  # the flash / memory-efficient kernels allocate through the caching allocator
            torch.backends.cuda.enable_cudnn_sdp(False)
            self.ev.write("info", cudnn_sdpa=False)
        torch.cuda.init()
        self._ctx = torch.empty(1, device="cuda")
        self.rng = random.Random(a.seed)
        self.pad: list = []
        self.kept: list = []
        self.kept_bytes = 0
        self.batches = 0

    # ---- start -----------------------------------------------------------------------------------
    def load(self, attn: str | None = "sdpa"):
        self.ev.phase("load_weights")
        t = time.monotonic()
        m = build_model(self.torch, attn)
        self.torch.cuda.synchronize()
        nbytes = sum(p.numel() * p.element_size() for p in m.parameters())
        self.ev.phase("weights_loaded", bytes=nbytes, seconds=round(time.monotonic() - t, 2))
        return m

    def prefill_pad(self, free_target: float) -> None:
        """The card pre-filled by a 'weights' tensor in 4 GiB shards, to leave `free_target` bytes free."""
        torch = self.torch
        self.ev.phase("pad")
        total = 0
        while True:
            free = torch.cuda.mem_get_info()[0]
            need = free - free_target
            if need < 64 << 20:
                break
            n = int(min(4 * GiB, need))
            self.pad.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
            total += n
            time.sleep(0.3)
        self.ev.phase("pad_done", bytes=total, free_bytes=int(torch.cuda.mem_get_info()[0]))

    # ---- one generate() batch --------------------------------------------------------------------
    def gen_batch(self, model, batch, outputs: bool = False):
        torch = self.torch
        from transformers import GenerationConfig

        b, n = len(batch), max(p for p, _ in batch)
        new = max(k for _, k in batch)
        ids = torch.randint(100, QWEN2_7B["vocab_size"] - 100, (b, n), device="cuda")
        mask = torch.ones(b, n, dtype=torch.long, device="cuda")
        for i, (p, _) in enumerate(batch):
            if p < n:  # left padding
                mask[i, : n - p] = 0
                ids[i, : n - p] = 0
        gc_ = GenerationConfig(
            max_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
            bos_token_id=None,
            return_dict_in_generate=outputs,
            output_logits=outputs,
        )
        t = time.monotonic()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc_)
        torch.cuda.synchronize()
        self.batches += 1
        return out, time.monotonic() - t

    def log_batch(self, batch, secs: float, **kw) -> None:
        self.ev.write(
            "batch",
            n=len(batch),
            prompt=[p for p, _ in batch],
            new=max(n for _, n in batch),
            seconds=round(secs, 3),
            allocated=int(self.torch.cuda.memory_allocated()),
            reserved=int(self.torch.cuda.memory_reserved()),
            **kw,
        )

    def oom(self, e: BaseException) -> int:
        torch = self.torch
        detail = str(e).splitlines()[0][:300]
        self.ev.write(
            "oom",
            exception=type(e).__name__,
            free_bytes=int(torch.cuda.mem_get_info()[0]),
            detail=detail,
            kept_batches=len(self.kept),
            kept_bytes=self.kept_bytes,
            allocated=int(torch.cuda.memory_allocated()),
            reserved=int(torch.cuda.memory_reserved()),
            retries=int(torch.cuda.memory_stats().get("num_alloc_retries", 0)),
        )
        print("real CUDA OOM:", detail, flush=True)
        time.sleep(2.5)  # the probe writes once more; then the process dies with its memory, as a server would
        return 3

    def serve_generate(self, model, seconds: float, stream: Stream, keep_every: int = 0, measure: list | None = None):
        """Static-batch generate() serving for `seconds`; keep_every>0 keeps every k-th batch's output."""
        torch = self.torch
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            batch = stream.take_static(self.a.max_n, self.a.budget_tokens)
            want = bool(keep_every) or measure is not None
            out, secs = self.gen_batch(model, batch, outputs=want)
            extra = {}
            if want:
                try:
                    b = tensor_bytes(out)
                except Exception as e:  # noqa: BLE001 - a count that fails must not stop the server
                    self.ev.write("info", tensor_bytes_failed=f"{type(e).__name__}: {e}")
                    b = 0
                extra["output_bytes"] = b
                if measure is not None:
                    measure.append((time.monotonic(), b))
                i += 1
                if keep_every and i % keep_every == 0:
                    self.kept.append(out)  # the bug: a per-request history that is never pruned
                    self.kept_bytes += b
                    extra["kept_bytes"] = self.kept_bytes
            del out
            if self.a.empty_each:  # the app gives the cache back after every batch: NVML sees each pass
                torch.cuda.empty_cache()
            self.log_batch(batch, secs, **extra)
        del torch

    def serve_waves(self, model, seconds: float, stream: Stream, leak_from: int | None = None) -> None:
        """Load in waves of `a.period` s: 70% busy, the padded-token budget growing from 2k to a peak drawn
        each wave (so each climb has its own height), then 30% quiet, where the app frees its cache. From wave
        `leak_from` every `a.keep_every`-th batch's output is kept (a leak under the load)."""
        torch, a = self.torch, self.a
        end = time.monotonic() + seconds
        wave = 0
        while time.monotonic() < end:
            peak = self.rng.choice([8192, 12288, 16384, 24576, 32768])
            leaking = leak_from is not None and wave >= leak_from
            if leaking and wave == leak_from:
                self.ev.phase("leak", keep_every=a.keep_every)
            self.ev.phase("wave", n=wave, budget=peak, leaking=leaking)
            t0, busy, i = time.monotonic(), 0.7 * a.period, 0
            while time.monotonic() - t0 < busy:
                budget = int(2048 + (time.monotonic() - t0) / busy * (peak - 2048))
                batch = stream.take_static(max_n=16, budget=budget)
                out, secs = self.gen_batch(model, batch, outputs=leaking)
                i += 1
                extra: dict = {"budget": budget}
                if leaking and i % a.keep_every == 0:
                    self.kept.append(out.logits)  # the bug: every k-th batch's logits kept across waves
                    self.kept_bytes += tensor_bytes(out.logits)
                    extra["kept_bytes"] = self.kept_bytes
                del out
                self.log_batch(batch, secs, **extra)
            self.ev.phase("quiet", n=wave)
            gc.collect()
            torch.cuda.empty_cache()
            time.sleep(0.3 * a.period)
            wave += 1

    def serve_ramp(self, model, seconds: float, stream: Stream) -> None:
        """Load that ramps up: the budget grows from 2k padded tokens to `a.peak_tokens` over 70% of `seconds`,
        then holds there; the cache is never emptied."""
        a = self.a
        t0 = time.monotonic()
        ramp = 0.7 * seconds
        while time.monotonic() - t0 < seconds:
            x = min(1.0, (time.monotonic() - t0) / ramp)
            budget = int(2048 + x * (a.peak_tokens - 2048))
            batch = stream.take_static(max_n=16, budget=budget)
            out, secs = self.gen_batch(model, batch)
            del out
            self.log_batch(batch, secs, budget=budget)

    def serve_lora(self, model, lora: Lora, seconds: float, stream: Stream, pick) -> None:
        """generate() serving for `seconds`, each batch with the adapter `pick()` names."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            aid = pick()
            loaded = lora.use(aid)
            batch = stream.take_static()
            out, secs = self.gen_batch(model, batch)
            del out
            self.log_batch(batch, secs, adapter=aid, loaded=loaded, adapters=len(lora.adapters), lora_bytes=lora.nbytes)

    def serve_sleep(self, model, stream: Stream) -> None:
        """Serve `a.seconds`, then `a.cycles` times: sleep (weights to host memory, cache given back) for
        `a.period` s, wake (weights back on the card), serve `a.seconds` again."""
        torch, a = self.torch, self.a
        self.serve_generate(model, a.seconds, stream)
        for n in range(a.cycles):
            self.ev.phase("sleep", n=n)
            model.to("cpu")
            gc.collect()
            torch.cuda.empty_cache()
            self.ev.phase("asleep", n=n, reserved=int(torch.cuda.memory_reserved()))
            time.sleep(a.period)
            self.ev.phase("wake", n=n)
            model.to("cuda")
            torch.cuda.synchronize()
            self.ev.phase("awake", n=n, reserved=int(torch.cuda.memory_reserved()))
            stream.queue.clear()  # requests that came while asleep were turned away
            stream.next = time.monotonic() + self.rng.expovariate(stream.rate)
            self.serve_generate(model, a.seconds, stream)

    # ---- scenarios -------------------------------------------------------------------------------
    def run(self) -> int:
        a = self.a
        torch = self.torch
        a.serve = SERVES_AS.get(a.serve, a.serve)
        try:
            if a.serve == "b":
                return self.run_cb()
            model = self.load()
            if a.pad_free_gb:
                self.prefill_pad(a.pad_free_gb * GB)
            stream = Stream(self.rng, a.rate, time.monotonic())
            self.ev.phase("serving")
            if a.serve == "a":
                self.serve_generate(model, a.seconds, stream)
            elif a.serve == "c":
                meas: list = []
                t0 = time.monotonic()
                self.serve_generate(model, a.warm, stream, measure=meas)
                span = max(1.0, time.monotonic() - t0)
                rate = sum(b for _, b in meas) / span  # output bytes per second if every batch were kept
                free = torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
                k = max(1, round(rate * a.target / max(free, 1)))
                self.ev.phase(
                    "leak",
                    keep_every=k,
                    output_bytes_per_second=int(rate),
                    expected_bytes_per_second=int(rate / k),
                    free_bytes=int(free),
                    projected_seconds=round(free / max(rate / k, 1.0), 1),
                )
                self.serve_generate(model, a.seconds, stream, keep_every=k)
                self.ev.phase("no_oom", kept_bytes=self.kept_bytes)
            elif a.serve == "g":
                self.serve_ramp(model, a.seconds, stream)
                self.ev.phase("no_oom")
            elif a.serve == "h":
                lora = Lora(torch, model, cap=8)
                self.serve_lora(model, lora, a.seconds, stream, lambda: self.rng.randrange(12))
                self.ev.phase("no_oom", adapters=len(lora.adapters), lora_bytes=lora.nbytes)
            elif a.serve == "i":
                lora = Lora(torch, model, cap=0)
                self.serve_lora(model, lora, a.warm, stream, lambda: 0)
                fresh = iter(range(1, 1 << 30))
                self.ev.phase("leak", adapter_bytes=lora.nbytes)
                self.serve_lora(model, lora, a.seconds, stream, lambda: next(fresh))
                self.ev.phase("no_oom", adapters=len(lora.adapters), lora_bytes=lora.nbytes)
            elif a.serve in ("e", "f"):
                self.serve_waves(model, a.seconds, stream, leak_from=1 if a.serve == "f" else None)
                self.ev.phase("no_oom", kept_bytes=self.kept_bytes)
            elif a.serve == "n":
                self.serve_sleep(model, stream)
            elif a.serve == "d":
                self.serve_generate(model, a.seconds * 0.3, stream)
                self.ev.phase("swap_load")
                model2 = self.load()
                self.ev.phase("swap_loaded")
                self.serve_generate(model, 30, stream)  # both resident: the old one drains the queue
                self.ev.phase("swap_free")
                model = model2
                del model2
                gc.collect()
                torch.cuda.empty_cache()
                self.ev.phase("swap_freed", reserved=int(torch.cuda.memory_reserved()))
                self.serve_generate(model, a.seconds * 0.4, stream)
        except torch.cuda.OutOfMemoryError as e:
            return self.oom(e)
        except RuntimeError as e:
            # On this card a cuDNN attention kernel that finds no memory raises a plain RuntimeError
            # ("mha_graph.execute(...) is_good()"), not OutOfMemoryError: seen on the H200 with the card at 99.6%.
            if torch.cuda.mem_get_info()[0] < 0.02 * torch.cuda.mem_get_info()[1]:
                return self.oom(e)
            raise
        self.ev.phase("done", batches=self.batches)
        time.sleep(1.5)
        return 0

    def run_cb(self) -> int:
        """Continuous batching: `generate_batch` per arrival window (a new manager, a new paged pool, each call)."""
        import inspect
        import traceback

        torch = self.torch
        from transformers import GenerationConfig

        try:
            from transformers.generation import ContinuousBatchingConfig  # type: ignore[attr-defined]
        except ImportError:
            ContinuousBatchingConfig = None  # noqa: N806
        model = self.load()
        sig = inspect.signature(model.generate_batch)
        self.ev.write("info", generate_batch=str(sig), cb_config=ContinuousBatchingConfig is not None)

        def call(inputs, new: int, eos):
            gc_ = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=0)
            kw = {}
            if "progress_bar" in sig.parameters:
                kw["progress_bar"] = False
            t = time.monotonic()
            out = model.generate_batch(inputs=inputs, generation_config=gc_, **kw)
            torch.cuda.synchronize()
            return out, time.monotonic() - t

        # Which way works on this transformers (tiny batch first): the default attention, then the paged names.
        tiny = [[int(x) for x in self.rng.sample(range(100, 5000), 16)] for _ in range(2)]
        ok = None
        for attn, eos in (
            (None, None),
            ("sdpa_paged", None),
            ("paged|sdpa", None),
            (None, 151643),
            ("sdpa_paged", 151643),
        ):
            try:
                if attn:
                    if hasattr(model, "set_attn_implementation"):
                        model.set_attn_implementation(attn)
                    else:
                        model.config._attn_implementation = attn
                out, secs = call(tiny, 8, eos)
                n_out = len(out)
                ok = (attn, eos)
                self.ev.write("info", cb_way={"attn": attn, "eos": eos}, tiny_outputs=n_out, seconds=round(secs, 2))
                break
            except torch.cuda.OutOfMemoryError as e:
                return self.oom(e)
            except Exception as e:  # noqa: BLE001 - try the next way, say why
                self.ev.write("info", cb_failed={"attn": attn, "eos": eos}, error=traceback.format_exc()[-1500:])
                print(f"generate_batch with attn={attn} eos={eos} failed: {type(e).__name__}: {e}", flush=True)
        if ok is None:
            self.ev.phase("cb_unavailable")
            return 4
        stream = Stream(self.rng, self.a.rate, time.monotonic())
        self.ev.phase("serving")
        end = time.monotonic() + self.a.seconds
        try:
            while time.monotonic() < end:
                time.sleep(self.a.window)  # requests gather while the last batch ran and in this window
                batch = stream.take_all()
                inputs = [[self.rng.randrange(100, QWEN2_7B["vocab_size"] - 100) for _ in range(p)] for p, _ in batch]
                new = max(n for _, n in batch)
                peak0 = torch.cuda.max_memory_reserved()
                torch.cuda.reset_peak_memory_stats()
                out, secs = call(inputs, new, ok[1])
                self.batches += 1
                done = sum(len(getattr(o, "generated_tokens", []) or []) for o in out.values())
                del out
                self.log_batch(
                    batch,
                    secs,
                    generated_tokens=done,
                    peak_reserved=int(torch.cuda.max_memory_reserved()),
                    prev_peak=int(peak0),
                )
        except torch.cuda.OutOfMemoryError as e:
            return self.oom(e)
        self.ev.phase("done", batches=self.batches)
        time.sleep(1.5)
        return 0


def server_main(a) -> int:
    s = Server(a)
    return s.run()


# =================================================================================================
# The recorder side (this process)
# =================================================================================================
class Tail(threading.Thread):
    """Reads the trace as `oomwatch record` writes it (one flushed line per sample) and keeps the offset
    from trace time to this machine's monotonic clock: min over lines of (when seen - t)."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.offset = math.inf
        self.samples = 0
        self.header = None
        self.stop = threading.Event()

    def run(self) -> None:
        f = None
        buf = ""
        while not self.stop.is_set():
            if f is None:
                try:
                    f = open(self.path, encoding="utf-8")  # noqa: SIM115
                except OSError:
                    time.sleep(0.01)
                    continue
            chunk = f.read()
            now = time.monotonic()
            if chunk:
                buf += chunk
                while "\n" in buf:
                    line, buf = buf.split("\n", 1)
                    if self.header is None:
                        with contextlib.suppress(ValueError):
                            self.header = json.loads(line)
                        continue
                    if '"gpus"' not in line:
                        continue
                    with contextlib.suppress(ValueError, KeyError):
                        t = json.loads(line)["t"]
                        self.offset = min(self.offset, now - t)
                        self.samples += 1
            else:
                time.sleep(0.01)
        if f:
            f.close()


def annotate(ev: dict, offset: float) -> dict | None:
    t = round(ev["mono"] - offset, 3)
    extra = {k: v for k, v in ev.items() if k not in ("mono", "wall", "kind", "name")}
    if ev["kind"] == "phase":
        name = ev["name"]
        if name in ("workload_start", "done"):
            return {"t": t, "event": name, **extra}
        if name == "weights_loaded":
            return {"t": t, "event": "ready", "what": "weights loaded", **extra}
        return {"t": t, "event": "phase", "name": name, **extra}
    if ev["kind"] == "oom":
        return {"t": t, "event": "oom", "gpu": 0, **extra}
    return None


def _pythonpath() -> str:
    """The repository first, then whatever the caller had (the carried wheels' --target folder)."""
    return pythonpath()


def replay(path: str) -> dict:
    r = subprocess.run(
        [PY, "-m", "oomwatch", "replay", path, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=_pythonpath()),
        timeout=300,
    )
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    trans = [x for x in lines if "alert" in x]
    summary = next((x["summary"] for x in reversed(lines) if "summary" in x), None)
    return {"rc": r.returncode, "transitions": trans, "summary": summary, "stderr_tail": r.stderr[-800:]}


def judge(rep: dict, t_oom: float | None, t_leak: float | None) -> dict:
    first: dict = {}
    for tr in rep["transitions"]:
        if tr.get("state") == "firing":
            first.setdefault(tr["alert"], tr["t"])
    page = [tr["t"] for tr in rep["transitions"] if tr.get("alert") == "GPUOOMImminent" and tr.get("state") == "firing"]
    page_before = [t for t in page if t_oom is None or t <= t_oom]
    leak = [tr["t"] for tr in rep["transitions"] if tr.get("alert") == "GPUMemoryLeak" and tr.get("state") == "firing"]
    s = rep.get("summary") or {}
    return {
        "first_firing": first,
        "pages": len(page),
        "oom_imminent_first_t": page_before[0] if page_before else None,
        "oom_imminent_firings": page[:20],
        "lead_s": round(t_oom - page_before[0], 1) if (t_oom is not None and page_before) else None,
        "oom_imminent_after_leak_onset_s": round(page_before[0] - t_leak, 1)
        if (t_leak is not None and page_before)
        else None,
        "leak_after_onset_s": round(leak[0] - t_leak, 1) if (t_leak is not None and leak) else None,
        "end": {
            g: {k: v.get(k) for k in ("shape", "leak", "phase", "verdict")} for g, v in (s.get("gpus") or {}).items()
        },
        "findings": [(f.get("kind"), f.get("summary")) for f in s.get("findings") or []],
        "episodes": [
            {
                k: e.get(k)
                for k in ("alert", "start", "end", "shape", "leak_bytes_per_second", "eta_seconds", "ended_because")
            }
            for e in s.get("episodes") or []
        ],
    }


def record(key: str, out: str, serve_args: list[str], cap_s: float) -> dict:
    from oomwatch.model import GpuInfo
    from oomwatch.sources.allocator import AllocatorSource

    sc = SCENARIOS[key]
    name = f"serve_{sc['name']}"
    raw = os.path.join(tempfile.mkdtemp(prefix="serve-"), f"{name}.raw.jsonl")
    path = os.path.join(out, f"{name}.jsonl")
    events = raw + ".events"
    probe_dir = tempfile.mkdtemp(prefix=f"oomwatch-probe-{key}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(probe_dir, 0o1777)
    env = dict(os.environ, PYTHONPATH=_pythonpath(), PYTHONUNBUFFERED="1")
    rec_log = open(raw + ".record.log", "w")  # noqa: SIM115
    rec = subprocess.Popen(
        [PY, "-m", "oomwatch", "record", "-o", raw, "--interval", "0.1"],
        cwd=ROOT,
        env=env,
        stdout=rec_log,
        stderr=rec_log,
    )
    tail = Tail(raw)
    tail.start()
    t_wait = time.monotonic()
    while tail.samples < 15 and time.monotonic() - t_wait < 30:  # 1.5 s of an idle card first
        time.sleep(0.05)
    hdr = tail.header or {}
    gpus = [GpuInfo(g["index"], g["name"], g["uuid"], g["total"]) for g in hdr.get("gpus", [])]
    src = AllocatorSource(gpus, probe_dir)
    srv_log = open(raw + ".server.log", "w")  # noqa: SIM115
    senv = dict(env, OOMWATCH_PROBE="1", OOMWATCH_PROBE_DIR=probe_dir, TOKENIZERS_PARALLELISM="false")
    allocs: list = []
    t_start = time.monotonic()
    killed = False
    nxt = time.monotonic()
    runs, restart_at = sc.get("runs", 1), None
    srv = None
    while True:
        now = time.monotonic()
        if srv is None or (restart_at is not None and now >= restart_at):  # (a supervisor restarting it)
            srv = subprocess.Popen(
                [PY, os.path.abspath(__file__), "--serve", key, "--events", events, *serve_args],
                cwd=ROOT,
                env=senv,
                stdout=srv_log,
                stderr=subprocess.STDOUT,
            )
            runs, restart_at = runs - 1, None
        if now >= nxt:
            got = src.poll(now)
            if got:
                allocs.append((now, got))
            nxt += 1.0
        if restart_at is None and srv.poll() is not None:
            if runs <= 0:
                break
            restart_at = now + RESTART_BACKOFF_S
        if now - t_start > cap_s:
            if srv.poll() is None:  # (not while waiting to restart one that exited)
                srv.send_signal(signal.SIGKILL)
                killed = True
                srv.wait()
            break
        time.sleep(0.05)
    t_exit = time.monotonic()
    time.sleep(3.0)  # the card after the server: idle
    rec.send_signal(signal.SIGTERM)
    try:
        rec.wait(15)
    except subprocess.TimeoutExpired:
        rec.kill()
    tail.stop.set()
    tail.join(2)
    rec_log.close()
    srv_log.close()
    with open(raw + ".server.log", encoding="utf-8", errors="replace") as f:
        slog = f.read()
    with open(raw + ".record.log", encoding="utf-8", errors="replace") as f:
        rlog = f.read()
    return finish(key, raw, path, events, allocs, tail.offset, t_exit, srv.returncode, killed, slog, rlog)


#: The device's own paths in a log (its probe and temporary directories, its Python's site-packages): a
#: result file says what happened, not where on that machine.
_PATHS = (
    (re.compile(r"/dev/shm/oomwatch-probe-[\w-]+"), "<probe dir>"),
    (re.compile(r"/tmp/[\w.-]+/"), "<tmp>/"),
    (re.compile(r"/tmp/[\w.-]+"), "<tmp>"),
    (re.compile(re.escape(ROOT) + "/"), ""),  # the checkout: paths in it read as the repository's own
    (re.compile(re.escape(ROOT) + r"\b"), "."),
    (re.compile(r"/\S*/site-packages/"), "<site-packages>/"),
    (re.compile(r"/\S*/bin/python3?\b"), "python3"),
)


def scrub(text: str) -> str:
    for pat, repl in _PATHS:
        text = pat.sub(repl, text)
    return text


def scrub_proc(ev: dict, out: str) -> dict:
    """A process description with the device's paths taken out of its command line (the output folder too)."""
    if "cmdline" in ev:
        ev["cmdline"] = [scrub(c.replace(os.path.abspath(out), "<out>")) for c in ev["cmdline"]]
    return ev


def finish(key, raw, path, events, allocs, offset, t_exit, rc, killed, slog, rlog) -> dict:
    """Merge the recording, the alloc lines and the server's phases into one trace; replay it; judge."""
    from oomwatch.trace import alloc_line

    sc = SCENARIOS[key]
    name = f"serve_{sc['name']}"
    # ---- merge: header annotations, alloc lines, phases ----
    with open(raw, encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = json.loads(lines[0])
    body = []
    for ln in lines[1:]:
        with contextlib.suppress(ValueError):
            body.append(scrub_proc(json.loads(ln), os.path.dirname(path)))
    header.update(
        scenario=name,
        expect=sc["expect"],
        note=sc["note"] + "; recorded by `oomwatch record --interval 0.1` (NVML 10 Hz); alloc lines: the "
        "server's allocator probe (oomwatch.probe) read once a second by oomwatch.sources.allocator and merged by "
        "bench/gpu_serve.py",
    )
    for mono, got in allocs:
        body.append(json.loads(alloc_line(mono - offset, got)))
    evs = []
    with contextlib.suppress(OSError), open(events, encoding="utf-8") as f:
        for ln in f:
            with contextlib.suppress(ValueError):
                evs.append(json.loads(ln))
    for ev in evs:
        a = annotate(ev, offset)
        if a:
            body.append(a)
    body.append({"t": round(t_exit - offset, 3), "event": "workload_exit", "rc": rc})
    body.sort(key=lambda x: x.get("t", 0.0))
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for x in body:
            f.write(json.dumps(x) + "\n")
    nvml_only = raw + ".nvml_only.jsonl"
    with open(nvml_only, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for x in body:
            if "alloc" not in x:
                f.write(json.dumps(x) + "\n")

    # ---- what happened, and what the analysis made of it ----
    def t_of(pred):
        return next((round(e["mono"] - offset, 3) for e in evs if pred(e)), None)

    t_oom = t_of(lambda e: e["kind"] == "oom")
    ooms = [round(e["mono"] - offset, 3) for e in evs if e["kind"] == "oom"]
    t_leak = t_of(lambda e: e["kind"] == "phase" and e["name"] == "leak")
    phases: dict = {}
    for e in evs:
        if e["kind"] == "phase":
            phases.setdefault(e["name"], round(e["mono"] - offset, 3))  # the first time of each
    batches = [e for e in evs if e["kind"] == "batch"]
    prompts = sorted(p for b in batches for p in b["prompt"])
    infos = [e for e in evs if e["kind"] in ("info", "oom") or (e["kind"] == "phase" and len(e) > 4)]
    samples = [x for x in body if "gpus" in x]
    used = [x["gpus"][0]["used"] for x in samples if x["gpus"]]
    rep = replay(path)
    rep_nvml = replay(nvml_only)
    res = {
        "trace": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "samples": len(samples),
        "alloc_lines": len(allocs),
        "seconds": round(samples[-1]["t"], 1) if samples else None,
        "offset_s_mono_minus_t": round(offset, 4),
        "server_rc": rc,
        "server_killed_at_cap": killed,
        "phases": phases,
        "oom_t": t_oom,
        "oom_ts": ooms,
        "leak_onset_t": t_leak,
        "leak_onset_to_oom_s": round(t_oom - t_leak, 1) if (t_oom is not None and t_leak is not None) else None,
        "used_gb": {"min": round(min(used) / GB, 2), "max": round(max(used) / GB, 2)} if used else None,
        "requests": {
            "batches": len(batches),
            "requests": len(prompts),
            "prompt_tokens_p50": prompts[len(prompts) // 2] if prompts else None,
            "prompt_tokens_p99": prompts[int(len(prompts) * 0.99)] if prompts else None,
            "prompt_tokens_max": prompts[-1] if prompts else None,
            "batch_seconds_p50": sorted(b["seconds"] for b in batches)[len(batches) // 2] if batches else None,
            "reserved_gb_max": round(max(b["reserved"] for b in batches) / GB, 2) if batches else None,
            "allocated_gb_max": round(max(b["allocated"] for b in batches) / GB, 2) if batches else None,
        },
        "server_notes": [{k: v for k, v in e.items() if k not in ("mono", "wall")} for e in infos][:20],
        "replay": judge(rep, t_oom, t_leak),
        "replay_nvml_only": judge(rep_nvml, t_oom, t_leak),
        "replay_rc": rep["rc"],
        "replay_stderr": rep["stderr_tail"],
        "replay_summary": rep["summary"],
        "replay_transitions": rep["transitions"],
        "server_log_tail": scrub(slog[-2500:]),
        "record_log_tail": scrub(rlog[-600:]),
    }
    return res


# =================================================================================================
def smoke() -> dict:
    import importlib
    import inspect

    out: dict = {"python": sys.version.split()[0]}
    for m in (
        "pynvml",
        "prometheus_client",
        "psutil",
        "httpx",
        "apscheduler",
        "numpy",
        "scipy",
        "torch",
        "transformers",
    ):
        try:
            mod = importlib.import_module(m)
            out[m] = getattr(mod, "__version__", "ok")
        except Exception as e:  # noqa: BLE001
            out[m] = f"MISSING: {e}"
    try:
        import torch
        import transformers

        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
        from transformers import GenerationMixin

        out["has_generate_batch"] = any(hasattr(c, "generate_batch") for c in (GenerationMixin,)) or hasattr(
            transformers, "ContinuousMixin"
        )
        try:
            from transformers.generation import ContinuousMixin  # type: ignore[attr-defined]

            out["generate_batch_sig"] = str(inspect.signature(ContinuousMixin.generate_batch))
            out["init_cb_sig"] = str(inspect.signature(ContinuousMixin.init_continuous_batching))
        except Exception as e:  # noqa: BLE001
            out["continuous_mixin"] = f"{type(e).__name__}: {e}"
        try:
            from transformers.generation import ContinuousBatchingConfig  # type: ignore[attr-defined]

            c = ContinuousBatchingConfig()
            out["cb_config"] = {k: v for k, v in vars(c).items() if isinstance(v, (int, float, str, bool, type(None)))}
        except Exception as e:  # noqa: BLE001
            out["cb_config"] = f"{type(e).__name__}: {e}"
        try:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

            out["attn_functions"] = sorted(ALL_ATTENTION_FUNCTIONS.keys())
        except Exception as e:  # noqa: BLE001
            out["attn_functions"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001
        out["torch_error"] = f"{type(e).__name__}: {e}"
    r = subprocess.run([PY, "-m", "oomwatch", "record", "--help"], capture_output=True, text=True, cwd=ROOT)
    out["record_help_rc"] = r.returncode
    out["record_help_tail"] = (r.stdout + r.stderr)[-400:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--only", default="a,b,c,d,e,f,g,h,i")
    ap.add_argument("--budget-s", type=float, default=560.0, help="stop starting scenarios past this")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seconds-a", type=float, default=150)
    ap.add_argument("--seconds-b", type=float, default=120)
    ap.add_argument("--warm-c", type=float, default=40)
    ap.add_argument("--target-c", type=float, default=110, help="seconds from leak onset to OOM to aim at")
    ap.add_argument("--pad-free-gb-c", type=float, default=22)
    ap.add_argument("--seconds-d", type=float, default=120)
    ap.add_argument("--pad-free-gb-d", type=float, default=45)
    ap.add_argument("--no-cudnn-c", action="store_true", help="c: turn cuDNN's SDPA off (torch OOMs instead)")
    ap.add_argument("--seconds-e", type=float, default=240)
    ap.add_argument("--period-e", type=float, default=40, help="e, f: the load's wave, busy 70%% then quiet")
    ap.add_argument("--pad-free-gb-f", type=float, default=14)
    ap.add_argument("--keep-every-f", type=int, default=1)
    ap.add_argument("--seconds-g", type=float, default=210)
    ap.add_argument("--pad-free-gb-g", type=float, default=13)
    ap.add_argument("--peak-tokens-g", type=int, default=40960, help="g: the budget the load ramps up to")
    ap.add_argument("--seconds-h", type=float, default=150)
    ap.add_argument("--warm-i", type=float, default=30, help="i: serving on one adapter before the leak")
    ap.add_argument("--pad-free-gb-i", type=float, default=16)
    ap.add_argument("--seconds-j", type=float, default=120)
    ap.add_argument("--pad-free-gb-jk", type=float, default=4, help="j, k: GB left free (a small card at 95%%)")
    ap.add_argument("--target-k", type=float, default=180, help="k: seconds from leak onset to OOM to aim at")
    ap.add_argument("--seconds-l", type=float, default=120)
    ap.add_argument("--seconds-n", type=float, default=40, help="n: serving between sleeps")
    ap.add_argument("--sleep-n", type=float, default=20, help="n: how long each sleep lasts")
    ap.add_argument("--target-m", type=float, default=240, help="m: seconds from leak onset to OOM to aim at")
    ap.add_argument("--warm-o", type=float, default=30, help="o: serving before each run's leak")
    ap.add_argument("--target-o", type=float, default=90, help="o: seconds from each leak onset to its OOM")
    ap.add_argument("--seconds-p", type=float, default=60, help="p: serving in each of the two runs")
    # the server's own flags
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--events", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=120, help=argparse.SUPPRESS)
    ap.add_argument("--warm", type=float, default=40, help=argparse.SUPPRESS)
    ap.add_argument("--target", type=float, default=110, help=argparse.SUPPRESS)
    ap.add_argument("--pad-free-gb", type=float, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=3.0, help=argparse.SUPPRESS)
    ap.add_argument("--window", type=float, default=1.0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    ap.add_argument("--no-cudnn-sdpa", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--period", type=float, default=40, help=argparse.SUPPRESS)
    ap.add_argument("--keep-every", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--peak-tokens", type=int, default=40960, help=argparse.SUPPRESS)
    ap.add_argument("--cycles", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--max-n", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--empty-each", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--budget-tokens", type=int, default=16384, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return server_main(a)
    t0 = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    res: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": QWEN2_7B}
    res["smoke"] = smoke()
    print(json.dumps(res["smoke"], indent=1)[:3000], flush=True)
    if a.smoke:
        with open(os.path.join(a.out, "gpu_serve.json"), "w") as f:
            json.dump(res, f, indent=1)
        return 0
    plan = {
        "a": (["--seconds", str(a.seconds_a), "--rate", "3"], a.seconds_a + 90),
        "b": (["--seconds", str(a.seconds_b), "--rate", "6", "--window", "1.0"], a.seconds_b + 90),
        "c": (
            [
                "--seconds",
                "600",
                "--warm",
                str(a.warm_c),
                "--target",
                str(a.target_c),
                "--pad-free-gb",
                str(a.pad_free_gb_c),
                "--rate",
                "3",
                *(["--no-cudnn-sdpa"] if a.no_cudnn_c else []),
            ],
            None,
        ),
        "d": (["--seconds", str(a.seconds_d), "--rate", "3", "--pad-free-gb", str(a.pad_free_gb_d)], a.seconds_d + 150),
        "e": (["--seconds", str(a.seconds_e), "--rate", "8", "--period", str(a.period_e)], a.seconds_e + 90),
        "f": (
            [
                "--seconds",
                "900",
                "--rate",
                "8",
                "--period",
                str(a.period_e),
                "--pad-free-gb",
                str(a.pad_free_gb_f),
                "--keep-every",
                str(a.keep_every_f),
            ],
            None,
        ),
    }
    plan["g"] = (
        [
            "--seconds",
            str(a.seconds_g),
            "--rate",
            "8",
            "--pad-free-gb",
            str(a.pad_free_gb_g),
            "--peak-tokens",
            str(a.peak_tokens_g),
        ],
        a.seconds_g + 120,
    )
    plan["h"] = (["--seconds", str(a.seconds_h), "--rate", "3"], a.seconds_h + 90)
    plan["i"] = (
        ["--seconds", "600", "--warm", str(a.warm_i), "--rate", "3", "--pad-free-gb", str(a.pad_free_gb_i)],
        None,
    )
    small = ["--pad-free-gb", str(a.pad_free_gb_jk), "--max-n", "4", "--budget-tokens", "8192", "--rate", "3"]
    plan["j"] = (["--seconds", str(a.seconds_j), *small], a.seconds_j + 90)
    plan["k"] = (["--seconds", "600", "--warm", "40", "--target", str(a.target_k), *small], None)
    plan["l"] = (["--seconds", str(a.seconds_l), "--empty-each", *small], a.seconds_l + 90)
    plan["m"] = (["--seconds", "600", "--warm", "30", "--target", str(a.target_m), "--empty-each", *small], None)
    plan["o"] = (
        [
            "--seconds",
            "600",
            "--warm",
            str(a.warm_o),
            "--target",
            str(a.target_o),
            "--pad-free-gb",
            str(a.pad_free_gb_c),
            "--rate",
            "3",
        ],
        None,
    )
    plan["p"] = (["--seconds", str(a.seconds_p), "--rate", "3"], 2 * (a.seconds_p + 90))
    plan["n"] = (
        ["--seconds", str(a.seconds_n), "--period", str(a.sleep_n), "--rate", "3"],
        4 * a.seconds_n + 3 * a.sleep_n + 150,
    )
    if a.no_cudnn_c:
        SCENARIOS["c"]["note"] += " (cuDNN's SDPA turned off, torch.backends.cuda.enable_cudnn_sdp(False))"
    for key in a.only.split(","):
        left = a.budget_s - (time.monotonic() - t0)
        args, cap = plan[key]
        cap = left - 25 if cap is None else min(cap, left - 25)
        if cap < 60:
            res[key] = {"skipped": f"{left:.0f} s of the budget left"}
            print(f"{key}: skipped ({left:.0f} s left)", flush=True)
            continue
        t = time.monotonic()
        try:
            res[key] = record(key, a.out, args, cap)
        except Exception:  # noqa: BLE001 - a broken scenario is a result; run the next
            import traceback

            res[key] = {"error": traceback.format_exc()[-2000:]}
        r = res[key]
        print(
            f"== {key} {SCENARIOS[key]['name']}: {time.monotonic() - t:.0f} s; "
            + json.dumps(
                {
                    k: r.get(k)
                    for k in ("trace", "bytes", "server_rc", "oom_t", "leak_onset_t", "used_gb", "requests", "error")
                }
            )[:1500],
            flush=True,
        )
        if "replay" in r:
            print(
                "   replay:",
                json.dumps({k: r["replay"][k] for k in ("first_firing", "lead_s", "end", "findings")})[:1500],
                flush=True,
            )
            print(
                "   nvml-only:",
                json.dumps({k: r["replay_nvml_only"][k] for k in ("first_firing", "lead_s")})[:600],
                flush=True,
            )
        with open(os.path.join(a.out, "gpu_serve.json"), "w") as f:
            f.write(scrub(json.dumps(res, indent=1)))  # the device's paths stay on the device
    return 0


if __name__ == "__main__":
    sys.exit(main())
