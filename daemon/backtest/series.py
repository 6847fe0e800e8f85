"""Which GPU-memory series a fleet's Prometheus holds, and which card each belongs to.

Three exporters are understood, each with its metric names, unit and labels (one table, `SOURCES`):
- dcgm-exporter: `DCGM_FI_DEV_FB_USED`, `_FREE`, `_RESERVED` in MiB; labels `gpu`, `UUID`, `Hostname`,
  `modelName`, and `pod`/`namespace`/`container` of the pod using the card when Kubernetes mapping is on;
- nvidia_gpu_exporter: `nvidia_smi_memory_used_bytes`, `_free_bytes`, `_total_bytes`; labels `uuid`, `name`;
- oomwatch itself: `oomwatch_gpu_memory_used_bytes`, `_free_bytes`, `_reserved_bytes`, `_total_bytes`.

A card is one physical GPU (its UUID where the exporter gives one). Its series are asked for by the card's
identity labels only, with `max by` those labels, because pod labels change whenever a pod using the card
changes: one card, many series over a month, one curve.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

MIB = 1 << 20


@dataclass(frozen=True)
class SourceKind:
    """One exporter's GPU-memory metrics: role (used, free, reserved, total) -> metric name; the unit."""

    name: str
    metrics: dict[str, str]
    scale_bytes: float  # bytes per unit of the metric's value
    uuid_label: str
    gpu_label: str | None
    model_label: str | None
    node_labels: tuple[str, ...]  # the first one present names the node


SOURCES: tuple[SourceKind, ...] = (
    SourceKind(
        "dcgm-exporter",
        {"used": "DCGM_FI_DEV_FB_USED", "free": "DCGM_FI_DEV_FB_FREE", "reserved": "DCGM_FI_DEV_FB_RESERVED"},
        MIB,
        "UUID",
        "gpu",
        "modelName",
        ("Hostname", "instance"),
    ),
    SourceKind(
        "nvidia_gpu_exporter",
        {
            "used": "nvidia_smi_memory_used_bytes",
            "free": "nvidia_smi_memory_free_bytes",
            "total": "nvidia_smi_memory_total_bytes",
        },
        1.0,
        "uuid",
        None,
        "name",
        ("instance",),
    ),
    SourceKind(
        "oomwatch",
        {
            "used": "oomwatch_gpu_memory_used_bytes",
            "free": "oomwatch_gpu_memory_free_bytes",
            "reserved": "oomwatch_gpu_memory_reserved_bytes",
            "total": "oomwatch_gpu_memory_total_bytes",
        },
        1.0,
        "uuid",
        "gpu",
        "name",
        ("node", "instance"),
    ),
)
#: Labels of the Kubernetes pod using a card, shown on its line when the exporter maps them.
POD_LABELS = ("namespace", "pod", "container")
_LABEL_VALUE_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


@dataclass(frozen=True)
class Card:
    """One GPU as the fleet's Prometheus knows it."""

    source: SourceKind
    node: str
    gpu: str
    uuid: str
    model: str
    identity: tuple[tuple[str, str], ...]  # the labels its series are selected by
    pod: dict[str, str] | None = field(default=None, compare=False)  # the last pod seen using it
    roles: frozenset[str] = frozenset()  # which of used/free/reserved/total it has series for

    def selector(self) -> str:
        """`{label="value",...}` matching this card's series."""
        return label_matchers(dict(self.identity))

    def query(self, role: str) -> str:
        """The PromQL for one role's curve: one series per card whatever the pod labels did."""
        by = ",".join(k for k, _ in self.identity)
        return f"max by ({by}) ({self.source.metrics[role]}{self.selector()})"

    @property
    def key(self) -> CardKey:
        """The card's identity as `series_key` gives it for each of its series."""
        return (self.source.name, self.identity)

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "gpu": self.gpu, "uuid": self.uuid, "model": self.model, "pod": self.pod}


def label_matchers(labels: dict[str, str]) -> str:
    """`{k="v",...}` with each value escaped as PromQL strings need."""
    return "{" + ",".join(f'{k}="{v.translate(_LABEL_VALUE_ESCAPE)}"' for k, v in labels.items()) + "}"


def matchers(extra: str = "") -> list[str]:
    """One `match[]` per GPU-memory metric of every source, narrowed by the user's `extra` matchers."""
    inner = extra.strip().strip("{}").strip()
    return [f"{m}{{{inner}}}" if inner else m for s in SOURCES for m in s.metrics.values()]


@dataclass
class _Group:
    """A card's series while the listing is read: its source, identity, labels seen, roles, last pod."""

    src: SourceKind
    ident: tuple[tuple[str, str], ...]
    labels: dict[str, str]
    roles: set[str] = field(default_factory=set)
    pod: dict[str, str] | None = None


def cards_from_series(label_sets: list[dict[str, str]]) -> list[Card]:
    """Group `/api/v1/series` answers into cards, sorted by node then GPU."""
    found: dict[CardKey, _Group] = {}
    for ls in label_sets:
        hit = series_key(ls)
        if hit is None:
            continue
        src, role, key = hit
        g = found.setdefault(key, _Group(src, key[1], ls))
        g.roles.add(role)
        if any(ls.get(p) for p in POD_LABELS):
            g.pod = {p: ls[p] for p in POD_LABELS if ls.get(p)}
    cards = []
    for g in found.values():
        src, ls = g.src, g.labels
        node_label = _node_label(src, ls)
        cards.append(
            Card(
                src,
                node=ls.get(node_label, "") if node_label else "",
                gpu=ls.get(src.gpu_label, "0") if src.gpu_label else "0",
                uuid=ls.get(src.uuid_label, ""),
                model=ls.get(src.model_label, "") if src.model_label else "",
                identity=g.ident,
                pod=g.pod,
                roles=frozenset(g.roles),
            )
        )
    cards.sort(key=lambda k: (k.node, _natural(k.gpu), k.uuid, k.source.name))
    return cards


#: A card's identity: its source's name and the sorted labels its series are selected by.
CardKey = tuple[str, tuple[tuple[str, str], ...]]
_BY_NAME = {m: (s, role) for s in SOURCES for role, m in s.metrics.items()}


def series_key(labels: dict[str, str]) -> tuple[SourceKind, str, CardKey] | None:
    """Which source, role (used, free, ...) and card a series is, from its labels (with `__name__`); None for
    a series that is none of the GPU-memory metrics or carries no identity label."""
    hit = _BY_NAME.get(labels.get("__name__", ""))
    if hit is None:
        return None
    src, role = hit
    ident = {k: labels[k] for k in (src.uuid_label, src.gpu_label, _node_label(src, labels)) if k and labels.get(k)}
    if not ident:
        return None
    return src, role, (src.name, tuple(sorted(ident.items())))


def _node_label(src: SourceKind, labels: dict[str, str]) -> str | None:
    """The first of the source's node labels this series has (dcgm-exporter: Hostname, else instance)."""
    return next((n for n in src.node_labels if labels.get(n)), None)


def _natural(s: str) -> tuple[int, str]:
    return (int(s), "") if s.isdigit() else (1 << 30, s)


# ---- sharding ----------------------------------------------------------------------------------------
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N) with 0 <= K < N; a ValueError says what is wrong."""
    m = _SHARD.match(text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ValueError(f"--shard must be K/N with 0 <= K < N (e.g. 0/4): {text!r}")
    return int(m.group(1)), int(m.group(2))


def shard_of(node: str, n: int) -> int:
    """The shard a node belongs to: crc32 of its name mod `n` (stable across runs, hosts and Pythons,
    unlike `hash()`), so every card of a node is in one shard and N backtests split a fleet."""
    return zlib.crc32(node.encode("utf-8")) % n


def in_shard(card: Card, shard: tuple[int, int] | None) -> bool:
    return shard is None or shard_of(card.node, shard[1]) == shard[0]
