"""oomwatch's daemon package: configuration, sources, the sampler loop, the analysis and the CLI.

Data flows one way: sources -> sampler -> analysis -> (findings, alert states) -> exporters.
Sources know nothing of analysis; the analysis never does I/O; exporters only read snapshots.
"""

from typing import Any

__version__ = "0.1.0"

# Resolved on first use (PEP 562), so that `import oomwatch.probe` inside a server process loads none of the
# daemon (no numpy, no analysis): the probe's package must cost its host nothing.
_LAZY = {
    "Analyzer": ".analysis.analyzer",
    "AnalysisConfig": ".config",
    "DaemonConfig": ".config",
    "EngineSnapshot": ".model",
    "GpuInfo": ".model",
    "GpuSample": ".model",
    "ProcInfo": ".model",
    "Sample": ".model",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Analyzer",
    "AnalysisConfig",
    "DaemonConfig",
    "EngineSnapshot",
    "GpuInfo",
    "GpuSample",
    "ProcInfo",
    "Sample",
    "__version__",
]
