"""One module per source: nvml (real GPUs), replay (traces), engines (/metrics), processes (psutil).

Each turns its failures into values and a `SourceStatus`; none imports the analysis.
"""
