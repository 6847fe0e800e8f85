"""rules/ with the real promtool, and the alert names agreeing across daemon, rules and runbooks."""

import os
import re
import subprocess

import yaml

from conftest import ROOT, need_binary
from daemon.config import ALERTS, runbook_url

RULES = os.path.join(ROOT, "rules")


def test_promtool_check_rules():
    r = subprocess.run([need_binary("promtool"), "check", "rules", os.path.join(RULES, "oomwatch.rules.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_unit_tests():
    r = subprocess.run([need_binary("promtool"), "test", "rules", "oomwatch.rules.test.yml"], cwd=RULES,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_in_rules_daemon_and_runbooks():
    with open(os.path.join(RULES, "oomwatch.rules.yml")) as f:
        doc = yaml.safe_load(f)
    rules = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert {r["alert"] for r in rules} == set(ALERTS)
    for r in rules:
        name = r["alert"]
        assert r["labels"]["severity"] == ALERTS[name][0]
        assert "for" in r and {"summary", "description", "runbook_url"} <= set(r["annotations"])
        assert r["annotations"]["runbook_url"] == runbook_url(name)
        assert os.path.exists(os.path.join(ROOT, "docs", "runbooks", name + ".md"))
    for g in doc["groups"]:
        for r in g["rules"]:
            if "record" in r:
                assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", r["record"]), r["record"]
