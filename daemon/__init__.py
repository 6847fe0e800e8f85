"""oomwatch's daemon package: configuration, sources, the sampler loop, the analysis and the CLI.

Data flows one way: sources -> sampler -> analysis -> (findings, alert states) -> exporters.
Sources know nothing of analysis; the analysis never does I/O; exporters only read snapshots.
"""

__version__ = "0.1.0"

from .analysis.analyzer import Analyzer  # noqa: E402
from .config import AnalysisConfig, DaemonConfig  # noqa: E402
from .model import EngineSnapshot, GpuInfo, GpuSample, ProcInfo, Sample  # noqa: E402

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
