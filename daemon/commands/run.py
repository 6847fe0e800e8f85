"""`oomwatch run`: parsed (and environment-filled) arguments to a `DaemonConfig`, then the daemon."""

from __future__ import annotations

import argparse
import dataclasses

from ..config import DaemonConfig
from ..credentials import ClientAuth

__all__ = ["config_from_args", "main"]


def config_from_args(args: argparse.Namespace) -> DaemonConfig:
    """The `DaemonConfig` of `run`'s arguments: a flag sets the field of its name (a list as a tuple),
    `--no-engine-discovery` clears `engine_discovery`; what is unset keeps DaemonConfig's default (the one
    source of defaults), so a new flag needs only its field."""
    names = {f.name for f in dataclasses.fields(DaemonConfig) if f.init}
    kw: dict[str, object] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in vars(args).items() if k in names and v is not None
    }
    if getattr(args, "no_engine_discovery", False):
        kw["engine_discovery"] = False
    kw["alertmanager_auth"] = ClientAuth.from_args(args, "alertmanager")
    kw["engine_auth"] = ClientAuth.from_args(args, "engine")
    return DaemonConfig(**kw)  # type: ignore[arg-type]


def main(args: argparse.Namespace) -> int:
    from ..run import run

    return run(config_from_args(args), args.duration)
