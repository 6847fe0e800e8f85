"""`oomwatch engines URL...`: what oomwatch reads from each engine's /metrics, every endpoint read at once
within --timeout in total, with `run`'s engine credential flags (a bearer token, basic auth, a CA)."""

from __future__ import annotations

import argparse
import json

__all__ = ["main"]


def main(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ..credentials import ClientAuth
    from ..sources.engines import EngineSource

    cred = ClientAuth.from_args(args, "engine")
    cred.check(args.urls)  # the credential files, as `run` checks them: one line, exit 2
    verify = cred.verify()
    srcs = [  # EngineUrlError: exit 2
        EngineSource(u, timeout_s=args.timeout, retries=0, auth=cred.auth(u), verify=verify) for u in args.urls
    ]
    for s in srcs:  # all at once, each on its own worker: the command ends within --timeout in total
        s.begin()
    snaps = [s.collect() for s in srcs]
    for s in srcs:
        s.close()
    bad = 0
    for snap in snaps:
        bad += not snap.up
        if args.json:
            print(json.dumps(asdict(snap)))
            continue
        if not snap.up:
            print(f"{snap.url}: DOWN: {snap.error}")
            continue
        print(f"{snap.url}: {snap.kind}" + (f", model {snap.model}" if snap.model else ""))
        for e in snap.engines or (snap,):
            tag = f"  engine {e.engine}: " if snap.engines else "  "
            kv = "n/a" if e.kv_cache_usage_ratio is None else f"{e.kv_cache_usage_ratio:.1%}"
            print(
                f"{tag}KV cache used {kv}; requests running {_n(e.requests_running)}, waiting "
                f"{_n(e.requests_waiting)}; preemptions {_n(e.preemptions_total)}; prefix-cache hit ratio "
                f"{'n/a' if e.prefix_cache_hit_ratio is None else f'{e.prefix_cache_hit_ratio:.1%}'}"
            )
        if snap.gpu_memory_utilization is not None or snap.num_gpu_blocks is not None:
            print(
                f"  cache config: gpu_memory_utilization {snap.gpu_memory_utilization}, num_gpu_blocks "
                f"{snap.num_gpu_blocks}, block_size {snap.block_size}, cache_dtype {snap.cache_dtype}, "
                f"prefix caching {snap.prefix_caching}, kv_cache_memory_bytes {snap.kv_cache_memory_bytes}"
            )
    return 1 if bad else 0


def _n(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"
