"""Write prometheusrule.yaml (prometheus-operator) from rules/oomwatch.rules.yml: one source of truth.

python deploy/kubernetes/build_prometheusrule.py [--check]
"""

import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "rules", "oomwatch.rules.yml")
OUT = os.path.join(HERE, "prometheusrule.yaml")


def build() -> str:
    with open(RULES) as f:
        spec = yaml.safe_load(f)
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "oomwatch", "labels": {"app": "oomwatch", "role": "alert-rules"}},
        "spec": spec,
    }
    return "# Generated from rules/oomwatch.rules.yml by build_prometheusrule.py; do not edit.\n" + yaml.safe_dump(
        doc, sort_keys=False, width=120
    )


if __name__ == "__main__":
    text = build()
    if "--check" in sys.argv:
        with open(OUT) as f:
            sys.exit(0 if f.read() == text else 1)
    with open(OUT, "w") as f:
        f.write(text)
