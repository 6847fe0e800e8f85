"""The fault-injection soak's quick mode (bench/fault_soak.py --quick, about 90 s): one leaking episode through
the real daemon while the engine endpoint drips, fails and goes silent, the Alertmanager flaps, the state
folder fills up and the daemon is restarted on it. The page must still come before the OOM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.integration
def test_quick_fault_soak_pages_every_oom_and_loses_nothing(tmp_path):
    out = tmp_path / "fault_soak.json"
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "fault_soak.py"), "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    assert p.returncode == 0, json.dumps(res["verdict"]) + p.stderr[-2000:]
    assert res["ooms"] == 1 and res["per_oom"][0]["paged"] and res["per_oom"][0]["lead_s"] > 5
    assert res["restarts"] and all(r["log_line"] for r in res["restarts"])
    assert res["metrics_scrapes"]["failed"] == 0
