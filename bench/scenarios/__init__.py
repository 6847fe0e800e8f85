"""Deterministic, labelled GPU-memory traces for the detection benchmark (`bench/detection.py`).

    python -m bench.scenarios --write DIR [--only NAME ...] [--fast] [--list]

A scenario is a few lines in `catalog.py` composed from the named behaviours of `behaviours.py` (each
models facts of the project's BEHAVIOURS.md), laid out as the engines lay out their processes
(`layouts.py`), on a `Trace` (`model.py`) that yields `gpu-memory-trace/1` records with the same
annotations as the real recordings, and the ground truth the scorer judges against. `Spec.tags` name the
classes (c1-c7 of the "Detection v3" issue) and BEHAVIOURS.md items a scenario stands for (`--tag`).
"""

from .catalog import SCENARIOS, Spec
from .model import Trace

#: The CI subset: short scenarios that together cover every alert the gate judges and each class of
#: BEHAVIOURS.md section 5 (about thirty, a few hundred thousand GPU-samples in all).
FAST = [name for name, spec in SCENARIOS.items() if spec.fast]

__all__ = ["FAST", "SCENARIOS", "Spec", "Trace", "write"]


def write(spec: Spec, path: str) -> int:
    """Write one scenario as a JSON Lines file; returns the number of GPU-samples."""
    import json

    with open(path, "w", encoding="utf-8") as f:
        for rec in spec.build().records():
            f.write(json.dumps(rec) + "\n")
    return spec.gpu_samples
