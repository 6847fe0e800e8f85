"""One table of alert specs (daemon/config.py ALERT_SPECS) is the one source of every alert's name,
severity, `for`, labels, card scope and flight dump: the daemon's alert book, the Prometheus rules, the
dashboard, the flight recorder and the runbooks read it, and the numbers the runbooks quote are the config's."""

import dataclasses
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from oomwatch import config, flight
from oomwatch.analysis import analyzer
from oomwatch.analysis.alerts import AlertBook, Condition
from oomwatch.analysis.hostmem import HostMemConfig
from oomwatch.config import ALERT_SPECS, SPECS, AlertTiming, AnalysisConfig, DaemonConfig

RULES = os.path.join(ROOT, "rules")
RUNBOOKS = os.path.join(ROOT, "docs", "runbooks")


def _build_rules(cfg):
    sys.path.insert(0, RULES)
    try:
        import build
    finally:
        sys.path.remove(RULES)
    return {
        r["alert"]: r for g in yaml.safe_load(build.build(cfg))["groups"] for r in g["rules"] if "alert" in r
    }, build


def _with(name, **changes):
    return tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in ALERT_SPECS)


def test_the_views_are_the_table():
    assert len(SPECS) == len(ALERT_SPECS) and all(s.severity in ("critical", "warning") for s in ALERT_SPECS)
    assert {s.name: (s.severity, s.meaning) for s in ALERT_SPECS if s.daemon} == config.ALERTS
    assert {"OomwatchDown": (SPECS["OomwatchDown"].severity, SPECS["OomwatchDown"].meaning)} == config.RULE_ONLY_ALERTS
    t = AlertTiming()
    assert t.for_s == {s.name: s.for_s for s in ALERT_SPECS if s.daemon}
    assert t.clear_by_alert == {"GPUOOMImminent": 60.0, "GPUMemoryLeak": 60.0, "GPUMemorySpikeRisk": 60.0}
    assert t.rule_for_s("HostMemoryLeak") == 10 * t.rule_eval_interval_s
    assert set(flight.DUMP_ALERTS) == {s.name for s in ALERT_SPECS if s.dumps} == set(analyzer.CARD_EPISODE_ALERTS)


def test_rules_are_generated_from_the_table():
    r = subprocess.run([sys.executable, os.path.join(RULES, "build.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, "run python rules/build.py: " + r.stderr
    base, build = _build_rules(DaemonConfig())
    assert list(base) == [s.name for s in ALERT_SPECS]  # the table's order
    for s in ALERT_SPECS:
        assert base[s.name]["labels"]["severity"] == s.severity
        if s.daemon:
            assert re.search(r"by \(([^)]*)\)", base[s.name]["expr"]).group(1) == ", ".join(("node", *s.labels))


def test_a_changed_for_in_the_table_changes_the_generated_rule():
    base, build = _build_rules(DaemonConfig())
    assert base["GPUMemoryLeak"]["for"] == "1m"
    specs = _with("GPUMemoryLeak", rule_for_evaluations=3, for_s=7.0, severity="critical")
    cfg = DaemonConfig(alerts=AlertTiming(specs=specs))
    rules, _ = _build_rules(cfg)
    assert rules["GPUMemoryLeak"]["for"] == "3m" and rules["GPUMemoryLeak"]["labels"]["severity"] == "critical"
    head = build.build(cfg).split("groups:", 1)[0]
    assert re.search(r"#   GPUMemoryLeak +daemon 7 s, rule 3 x 1m = 3m", head)
    assert {n: r["for"] for n, r in rules.items() if n != "GPUMemoryLeak"} == {
        n: r["for"] for n, r in base.items() if n != "GPUMemoryLeak"
    }
    new = dataclasses.replace(SPECS["GPUMemoryLeak"], name="GPUNewAlert")
    with pytest.raises(SystemExit, match="GPUNewAlert"):  # an alert without a rule is refused
        build.build(DaemonConfig(alerts=AlertTiming(specs=(*ALERT_SPECS, new))))


def test_the_alert_book_waits_the_tables_for():
    cond = Condition("GPUStrayProcess", (("gpu", "0"),), "s", "d")
    fast = AlertBook(AlertTiming(specs=_with("GPUStrayProcess", for_s=0.0)))
    slow = AlertBook(AlertTiming())
    assert [t.state for t in fast.update(0.0, [cond])] == ["firing"]
    assert slow.update(0.0, [cond]) == [] and slow.update(SPECS["GPUStrayProcess"].for_s, [cond])


def test_the_dashboard_is_built_from_the_config():
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "grafana", "build.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


# ---- the runbooks ---------------------------------------------------------------------------------------
def _minutes(s):
    return f"{s / 60:g} minutes"


def _pct(x):
    return f"{x * 100:g}%"


def _quoted():
    """(runbook, phrase) for every number a runbook quotes, the number formatted from the config."""
    a, hm, d = AnalysisConfig(), HostMemConfig(), DaemonConfig()
    _, build = _build_rules(d)
    port = config.DEFAULT_PORT
    return [
        ("GPUOOMImminent", f"within the horizon ({_minutes(a.oom_horizon_s)} by default)"),
        ("GPUOOMImminent", f"a trace of the last {_minutes(a.window_s)}"),  # the flight recorder's span
        ("GPUOOMImminent", f"http://<host>:{port}/"),
        ("GPUOOMImminent", f"are still {_pct(1 / (1 + a.start_eta_ratio))}"),  # Gott's odds at the ratio
        ("GPUOOMImminent", f"it gave back in the last {_minutes(a.spike_window_s)}"),  # the envelope's window
        ("GPUMemorySpikeRisk", f"one {_pct(a.spike_margin)} taller"),
        ("GPUMemorySpikeRisk", f"in the last {_minutes(a.spike_window_s)}"),
        ("GPUMemorySpikeRisk", f"samples at {1 / d.interval:g} Hz"),
        ("GPUMemorySpikeRisk", "a 15-30 s Prometheus scrape"),  # Prometheus' common intervals, not ours
        ("GPUMemoryLeak", f"stopped for {a.stall_gaps:g} of its own gaps"),
        ("GPUMemoryLeak", f"for {a.stall_gaps:g} + ln n of the leak's own n mean gaps"),  # a firing one resolves
        (
            "GPUMemoryLeak",
            f"{_pct(a.leak_for_fraction)} of its ETA, between {a.leak_for_min_s:g} s and {a.leak_for_max_s:g} s",
        ),
        ("GPUMemoryLeak", f"filled the card ({_pct(a.no_headroom_fraction)} of it)"),
        ("GPUMemoryLeak", f"at most {a.start_eta_ratio:g} times its own age"),
        ("GPUMemoryImbalance", f"more than {_pct(a.imbalance_fraction)} of their memory"),
        ("KVCachePressure", f"nearly full (> {_pct(a.kv_pressure_ratio)})"),
        ("KVCachePressure", "http://<server>:8000"),  # vLLM's default port, not ours
        ("HostMemoryLeak", f"first {_minutes(hm.warmup_s)} it tests the last {_minutes(hm.window_s)} of scans"),
        ("HostMemoryLeak", f"at least {hm.min_bytes_per_second / 1024:g} KiB/s"),
        ("HostMemoryLeak", f"and {hm.min_growth_bytes / (1 << 20):g} MiB over the window"),
        ("HostMemoryLeak", f"The warm-up is {_minutes(hm.warmup_s)} per process"),
        ("OomwatchDown", f"(`{build.DOWN_SELECTOR} == 0`)"),
        ("OomwatchDown", f"http://<pod-ip>:{port}/healthz"),
        ("OomwatchDown", f"`--listen 0.0.0.0:{port}` (the default {config.DEFAULT_LISTEN.split(':')[0]} is"),
    ]


NUMBER = re.compile(r"\d+(?:\.\d+)?(?:-\d+)?\s?(?:%|minutes?|seconds?|hours?|KiB/s|MiB|GiB|Hz|s\b)|:\d{4,5}\b")


def _text(name):
    with open(os.path.join(RUNBOOKS, name + ".md"), encoding="utf-8") as f:
        return " ".join(f.read().split())  # phrases may wrap


def test_every_alert_has_a_runbook_headed_with_its_severity():
    assert sorted(f[:-3] for f in os.listdir(RUNBOOKS) if f.endswith(".md")) == sorted(SPECS)
    for s in ALERT_SPECS:
        with open(os.path.join(RUNBOOKS, s.name + ".md"), encoding="utf-8") as f:
            assert f.readline().strip() == f"# {s.name} ({s.severity})"


def test_the_numbers_the_runbooks_quote_are_the_configs():
    quoted = _quoted()
    for name, phrase in quoted:
        assert phrase in _text(name), f"docs/runbooks/{name}.md should say {phrase!r} (from daemon/config.py)"
    for name in SPECS:  # and no number a runbook quotes escapes the list above
        text = _text(name)
        covered = [
            m.span() for _, p in ((n, p) for n, p in quoted if n == name) for m in re.finditer(re.escape(p), text)
        ]
        for m in NUMBER.finditer(text):
            assert any(lo <= m.start() and m.end() <= hi for lo, hi in covered), (
                f"docs/runbooks/{name}.md quotes {m.group()!r} ({text[max(0, m.start() - 40) : m.end() + 20]!r}): "
                "check it against the config in tests/test_alert_specs.py"
            )
