"""MIG: what oomwatch can and cannot see on a card split into MIG instances. Pure.

Each MIG instance NVML lets the daemon open is watched as a card of its own (daemon/sources/nvml.py).
Where the instances cannot be read, only the whole card is, and one instance can run out of memory long
before the card looks full: the user must hear that the watch is blind there, and why.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..model import GpuInfo
from .findings import Finding


def mig_findings(cards: Iterable[object], t: float | None) -> list[Finding]:
    """An `info` finding per card whose MIG mode is on but whose instances could not be read."""
    out = []
    for card in cards:
        g = getattr(card, "info", card)  # a GpuInfo, or an analysis card state holding one
        if not isinstance(g, GpuInfo) or not g.mig or g.mig_parent is not None or not g.mig_note:
            continue
        summary = (
            f"GPU {g.index} has MIG mode on, but oomwatch cannot read each MIG instance's memory "
            f"({g.mig_note}); it watches the whole card, so one instance running out is not seen"
        )
        advice = (
            "Give the sidecar NVML access to the MIG devices: in Kubernetes request the same MIG resources "
            "or run the DaemonSet with all GPUs visible (NVIDIA_VISIBLE_DEVICES=all, "
            "NVIDIA_MIG_MONITOR_DEVICES=all with the NVIDIA container toolkit); on a host, run it as a user "
            "allowed to query MIG "
            "(nvidia-smi mig -lgi must list the instances). Check that instances exist (nvidia-smi mig -lci)."
        )
        out.append(
            Finding(
                "mig_unreadable",
                str(g.index),
                None,
                summary,
                {"gpu": g.index, "uuid": g.uuid, "why": g.mig_note},
                advice,
                "info",
                t,
            )
        )
    return out
