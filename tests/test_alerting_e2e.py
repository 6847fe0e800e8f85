"""Alerting end to end with real binaries: oomwatch -> Alertmanager -> webhook, and Prometheus + rules/.

The staircase trace is a real recording of a leak that ends in a real CUDA OOM at 57.26 s of trace time
(its `oom` annotation, read here by the test only).
"""

import json
import os
import time

import pytest

from conftest import ROOT, example, stop_process
from servers import Alertmanager, Prometheus, Webhook, start_oomwatch

pytestmark = pytest.mark.integration
OOM_AT = 57.26  # staircase.jsonl's real OOM, seconds of trace time


@pytest.fixture
def hook():
    w = Webhook()
    yield w
    w.close()


def _stop(p):
    stop_process(p)


def test_oom_imminent_reaches_the_webhook_before_the_oom_and_resolves(tmp_path, hook):
    am = Alertmanager(str(tmp_path), hook.url).start()
    speed = 4.0
    t0 = time.time()
    # No --loop: the trace ends after its OOM and the alert resolves (a loop would start the leak again
    # within the alert's hysteresis).
    p, _ = start_oomwatch(
        "--replay",
        example("staircase.jsonl"),
        "--speed",
        str(speed),
        "--alertmanager-url",
        am.url,
        "--flight-dir",
        str(tmp_path / "flight"),
    )
    try:
        # Generous bounds, left as soon as the notification arrives: on a loaded machine the daemon's start,
        # Alertmanager's group_interval and the webhook all slow down, and the test judges order and lead
        # (trace time), not how fast this machine is.
        deadline = t0 + 60
        while time.time() < deadline and not hook.alerts("GPUOOMImminent", "firing"):
            time.sleep(0.2)
        firing = hook.alerts("GPUOOMImminent", "firing")
        assert firing, "GPUOOMImminent never reached the webhook"
        deadline = time.time() + 90  # the trace's rest (~5 s at this speed), the hysteresis, one group_interval
        while time.time() < deadline and not hook.alerts("GPUOOMImminent", "resolved"):
            time.sleep(0.2)
        t_fire, a = firing[0]
        assert t_fire - t0 < OOM_AT / speed, f"arrived {t_fire - t0:.1f}s after start, OOM at {OOM_AT / speed:.1f}s"
        assert a["labels"]["severity"] == "critical" and a["labels"]["gpu"] == "0"
        assert a["annotations"]["runbook_url"].endswith("docs/runbooks/GPUOOMImminent.md")
        assert "runs out of memory in" in a["annotations"]["summary"]
        trace = a["annotations"].get("trace")
        assert trace and os.path.exists(trace)  # the flight recorder's file
        with open(trace) as f:
            assert json.loads(f.readline())["format"] == "gpu-memory-trace/1"
        resolved = hook.alerts("GPUOOMImminent", "resolved")
        assert resolved and resolved[0][0] > t0 + OOM_AT / speed  # after the leak stopped
    finally:
        _stop(p)
        am.stop()


def test_alert_survives_alertmanager_down_and_restart(tmp_path, hook):
    am = Alertmanager(str(tmp_path), hook.url)  # not started: down at first
    p, _ = start_oomwatch("--replay", example("stray.jsonl"), "--speed", "2", "--loop", "--alertmanager-url", am.url)
    try:
        time.sleep(8)  # the stray has fired inside oomwatch while Alertmanager is down
        assert p.poll() is None
        am.start()
        deadline = time.time() + 30
        while time.time() < deadline and not hook.alerts("GPUStrayProcess", "firing"):
            time.sleep(0.2)
        got = hook.alerts("GPUStrayProcess", "firing")
        assert got and got[0][1]["labels"]["pid"] == "928"
        # restart: a fresh Alertmanager with no memory still gets the firing alert re-sent
        am.stop()
        n = len(hook.events)
        time.sleep(2)
        am.start()
        deadline = time.time() + 30
        while time.time() < deadline and len(hook.events) == n:
            time.sleep(0.2)
        assert len(hook.events) > n
        assert p.poll() is None
    finally:
        _stop(p)
        am.stop()


def test_prometheus_with_rules_fires_the_matching_rule(tmp_path):
    p, target = start_oomwatch("--replay", example("staircase.jsonl"), "--speed", "1", "--loop")
    prom = Prometheus(str(tmp_path), target, [os.path.join(ROOT, "rules", "oomwatch.rules.yml")])
    try:
        deadline = time.time() + 60
        firing = []
        while time.time() < deadline:
            firing = [
                a for a in prom.alerts() if a["labels"]["alertname"] == "GPUOOMImminent" and a["state"] == "firing"
            ]
            if firing:
                break
            time.sleep(0.5)
        assert firing and firing[0]["labels"]["gpu"] == "0"
        assert prom.query("gpu:oomwatch_gpu_memory_used:ratio")  # recording rules evaluate
        assert not [a for a in prom.alerts() if a["labels"]["alertname"] == "GPUTelemetryDown"]
    finally:
        prom.stop()
        _stop(p)


def _am_alerts(am, name):
    import urllib.parse
    import urllib.request

    q = urllib.parse.quote(f'alertname="{name}"')
    with urllib.request.urlopen(f"{am.url}/api/v2/alerts?filter={q}", timeout=5) as r:
        return json.loads(r.read())


def test_pushed_alert_and_rule_copy_are_one_alert_in_alertmanager(tmp_path, hook):
    """oomwatch pushes GPUOOMImminent and Prometheus evaluates rules/ on its scrapes, both into one
    Alertmanager: the rule drops instance and job, both carry `node`, so Alertmanager holds one alert."""
    am = Alertmanager(str(tmp_path), hook.url).start()
    env = dict(os.environ, NODE_NAME="gpu-node-7")
    p, target = start_oomwatch(
        "--replay", example("staircase.jsonl"), "--speed", "2", "--loop", "--alertmanager-url", am.url, env=env
    )
    prom = Prometheus(
        str(tmp_path), target, [os.path.join(ROOT, "rules", "oomwatch.rules.yml")], alertmanager=am.url[7:]
    )
    try:
        deadline = time.time() + 60
        fired_at = None
        while time.time() < deadline:
            rule = [a for a in prom.alerts() if a["labels"]["alertname"] == "GPUOOMImminent" and a["state"] == "firing"]
            if rule and fired_at is None:
                fired_at = time.time()
            if fired_at is not None and time.time() - fired_at > 3:  # the rule's copy has been sent (1 s resend)
                break
            time.sleep(0.3)
        assert fired_at is not None, "the rule never fired"
        assert hook.alerts("GPUOOMImminent", "firing"), "the pushed alert never arrived"
        got = [a for a in _am_alerts(am, "GPUOOMImminent") if a["status"]["state"] == "active"]
        assert len(got) == 1, [a["labels"] for a in got]
        assert got[0]["labels"] == {
            "alertname": "GPUOOMImminent",
            "severity": "critical",
            "node": "gpu-node-7",
            "gpu": "0",
            "uuid": rule[0]["labels"]["uuid"],
        }
        assert set(rule[0]["labels"]) == set(got[0]["labels"])  # the rule's own labels: no instance, no job
    finally:
        prom.stop()
        _stop(p)
        am.stop()
