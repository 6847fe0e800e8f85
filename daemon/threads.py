"""Keep numpy's BLAS to one thread in the daemon: a sidecar's analysis is small vectors, not matrices.

OpenBLAS starts one thread per core when numpy loads: on a 32-core GPU host the idle daemon ran 37 threads
and used 19.7% of a core; pinned to one it ran 6 and used 4.3%. The variables are read only when the BLAS
library loads, so `pin_blas_threads()` runs at the top of the console entry, before anything imports numpy.
A value the user set is kept. Never called from code that runs inside someone else's process (the probe).
"""

from __future__ import annotations

import os

from .config import BLAS_THREADS

__all__ = ["BLAS_ENV", "pin_blas_threads"]

#: OpenBLAS, OpenMP (also read by OpenBLAS builds that use it) and MKL.
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pin_blas_threads(n: int = BLAS_THREADS) -> None:
    """Default each BLAS thread-count variable to `n` unless it is set already."""
    for name in BLAS_ENV:
        os.environ.setdefault(name, str(n))
