"""vLLM general plugin: `pip install oomwatch` next to vLLM and set `OOMWATCH_PROBE=1`.

vLLM calls every `vllm.general_plugins` entry point in each of its processes (API server, engine core,
workers), after torch is imported, so each PID starts its own probe. Without the variable this does nothing.
"""

from __future__ import annotations

from . import enabled, start


def register() -> None:
    """The entry point vLLM calls; never raises."""
    if enabled():
        start()
