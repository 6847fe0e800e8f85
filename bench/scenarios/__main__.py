"""`python -m bench.scenarios --write DIR [--only NAME ...] [--fast] [--tag TAG]`: write the scenarios as traces."""

import argparse
import os
import sys

from . import FAST, SCENARIOS, write


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scenarios", description=__doc__)
    ap.add_argument("--write", metavar="DIR", help="write each scenario to DIR/NAME.jsonl")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios")
    ap.add_argument("--fast", action="store_true", help="only the CI subset")
    ap.add_argument("--tag", help="only the scenarios with this tag (a class c1-c7 or a BEHAVIOURS.md item)")
    ap.add_argument("--list", action="store_true", help="list the scenarios (cards, length, rate, size)")
    a = ap.parse_args(argv)
    names = a.only or (FAST if a.fast else list(SCENARIOS))
    if a.tag:
        names = [n for n in names if n in SCENARIOS and a.tag in SCENARIOS[n].tags]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario {unknown[0]!r} (see --list)", file=sys.stderr)
        return 2
    if a.list or not a.write:
        for n in names:
            sp = SCENARIOS[n]
            print(
                f"{n:40s} {len(sp.cards)}x{sp.cards[0]:5s} {sp.duration / 3600:7.2f} h {sp.hz:5.1f} Hz "
                f"{sp.gpu_samples:9d} GPU-samples{'  fast' if sp.fast else ''}"
            )
        print(f"{len(names)} scenarios, {sum(SCENARIOS[n].gpu_samples for n in names)} GPU-samples")
        return 0
    try:
        os.makedirs(a.write, exist_ok=True)
    except OSError as e:
        print(f"cannot create {a.write}: {e.strerror or e}", file=sys.stderr)
        return 2
    for n in names:
        write(SCENARIOS[n], os.path.join(a.write, n + ".jsonl"))
        print(f"wrote {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
