"""Copy the rules and the dashboard into the chart, which can read only its own files (`.Files.Get`).

    python deploy/helm/build.py           # rewrites oomwatch/files/
    python deploy/helm/build.py --check   # exit 1 if the chart's copies are stale

rules/oomwatch.rules.yml (from rules/build.py) and grafana/oomwatch.json (from grafana/build.py) stay the
one source; tests/test_helm.py runs the check.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FILES = os.path.join(HERE, "oomwatch", "files")
COPIES = {
    os.path.join(ROOT, "rules", "oomwatch.rules.yml"): os.path.join(FILES, "oomwatch.rules.yml"),
    os.path.join(ROOT, "grafana", "oomwatch.json"): os.path.join(FILES, "oomwatch.json"),
}


def stale() -> list[str]:
    out = []
    for src, dst in COPIES.items():
        with open(src, "rb") as f:
            want = f.read()
        try:
            with open(dst, "rb") as f:
                if f.read() == want:
                    continue
        except FileNotFoundError:
            pass
        out.append(os.path.relpath(dst, ROOT))
    return out


if __name__ == "__main__":
    if "--check" in sys.argv:
        old = stale()
        if old:
            print(f"stale in the chart: {', '.join(old)}: run python deploy/helm/build.py", file=sys.stderr)
        sys.exit(1 if old else 0)
    os.makedirs(FILES, exist_ok=True)
    for src, dst in COPIES.items():
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
