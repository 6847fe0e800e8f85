"""Cards of one server that do not match: a spread beyond the threshold, or one card idle beside a full one.

Tensor-parallel ranks hold the same shard sizes and the same KV pool, so their curves should overlap.
A lasting spread means one rank holds something the others do not (a leak on one rank, a stray beside
it); one card idle beside a full one usually means tensor parallelism was not set.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CardLoad:
    gpu: str
    used_bytes: float
    capacity_bytes: float
    group: str | None  # server the card belongs to (None: no process seen)
    idle: bool
    leak: bool = False  # its leak warning has held its confirmation (not one evaluation's verdict)
    leaked: bool = False  # ... now or before, in this server's life (a rank that leaks too is no flat peer)


@dataclass(frozen=True, slots=True)
class Imbalance:
    kind: str  # spread | idle_card
    gpus: tuple[str, ...]
    spread_fraction: float
    high_gpu: str
    low_gpu: str
    leak_gpus: tuple[str, ...] = ()


def find_imbalance(cards: list[CardLoad], spread_fraction: float, busy_fraction: float) -> list[Imbalance]:
    out: list[Imbalance] = []
    if len(cards) < 2:
        return out
    groups: dict[str, list[CardLoad]] = {}
    for c in cards:
        if c.group is not None and not c.idle:
            groups.setdefault(c.group, []).append(c)
    for members in groups.values():
        if len(members) < 2:
            continue
        fr = [m.used_bytes / m.capacity_bytes for m in members]
        hi, lo = max(range(len(fr)), key=fr.__getitem__), min(range(len(fr)), key=fr.__getitem__)
        leaking = tuple(m.gpu for m in members if m.leak)
        # beside a peer that never leaked: where every rank leaks, their warnings confirm one after another and
        # one may lapse at the top, which would tell the same server's imbalance again and again
        one_rank_leaks = bool(leaking) and any(not (m.leak or m.leaked) for m in members)
        if fr[hi] - fr[lo] > spread_fraction or one_rank_leaks:
            out.append(
                Imbalance(
                    "spread",
                    tuple(m.gpu for m in members),
                    fr[hi] - fr[lo],
                    members[hi].gpu,
                    members[lo].gpu,
                    leaking,
                )
            )
    idle = [c for c in cards if c.idle]  # a CUDA context alone (< 1% of the card) is still idle
    full = [c for c in cards if not c.idle and c.used_bytes / c.capacity_bytes >= busy_fraction]
    if idle and full:
        top = max(full, key=lambda c: c.used_bytes / c.capacity_bytes)
        out.append(
            Imbalance(
                "idle_card",
                tuple(c.gpu for c in full + idle),
                top.used_bytes / top.capacity_bytes,
                top.gpu,
                idle[0].gpu,
            )
        )
    return out
