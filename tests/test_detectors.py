"""The analysis as detectors behind one interface (daemon/analysis/detectors.py): each returns its findings
paired with their alert conditions, and each runs isolated, so one that raises is counted, logged once and
alerted on (GPUTelemetryDown, source `analysis:<detector>`) while the others' alerts still fire."""

import logging

import pytest

from conftest import example
from oomwatch.analysis import detectors, findings
from oomwatch.analysis.analyzer import Analyzer
from oomwatch.model import Sample, SourceStatus
from oomwatch.trace import read_trace


def replay(name, setup=None):
    h, recs = read_trace(example(name + ".jsonl"))
    a = Analyzer(h.gpus)
    if setup is not None:
        setup(a)
    trans = []
    for _, r in recs:
        if isinstance(r, Sample):
            trans += a.add_sample(r)
        else:
            a.add_proc(r)
    return a, trans


def fired(trans):
    return {(tr.alert.alertname, tr.alert.labels) for tr in trans if tr.state == "firing"}


def names(trans):
    return {n for n, _ in fired(trans)}


class Boom:
    name = "boom"
    per_card = True

    def run(self, ctx):
        raise RuntimeError("a bug in a detector")


def test_every_detector_has_a_name_and_pairs_findings_with_conditions():
    a, _ = replay("staircase")
    ds = detectors.default_detectors()
    assert [d.name for d in ds] == [
        "curve",
        "strays",
        "visibility",
        "imbalance",
        "kv_pressure",
        "telemetry",
        "host_ram",
    ]
    assert len({d.name for d in ds}) == len(ds) and [d.per_card for d in ds[:2]] == [True, True]
    assert not a.analysis_errors and any(f.kind == "leak" for f in a.fired.values())


@pytest.mark.analysis_errors
def test_a_raising_detector_is_counted_logged_once_and_alerted_while_the_others_fire(caplog):
    clean, clean_trans = replay("staircase")
    assert "GPUMemoryLeak" in names(clean_trans)
    with caplog.at_level(logging.ERROR, logger="oomwatch.analysis"):
        a, trans = replay("staircase", lambda a: a.detectors.insert(0, Boom()))
    # counted per evaluation (one card: once each), logged once with the exception's type
    assert a.analysis_errors["boom"] > 10 and set(a.analysis_errors) == {"boom"}
    logged = [r for r in caplog.records if "boom" in r.getMessage()]
    assert len(logged) == 1 and "RuntimeError" in logged[0].getMessage()
    # alerted: a GPUTelemetryDown-style alert for the analysis itself ...
    assert ("GPUTelemetryDown", (("source", "analysis:boom"),)) in fired(trans)
    err = [f for f in a.findings if f.kind == "analysis_error"]
    assert err and err[0].severity == "critical" and err[0].evidence["detector"] == "boom"
    assert err[0].evidence["gpus"] == ["0"] and "RuntimeError" in err[0].evidence["error"]
    # ... while every alert the clean run raised still fires, at the same moments
    assert fired(clean_trans) <= fired(trans)
    clean_t = [(tr.t, tr.alert.alertname, tr.state) for tr in clean_trans]
    t = [(tr.t, tr.alert.alertname, tr.state) for tr in trans if dict(tr.alert.labels).get("source") != "analysis:boom"]
    assert t == clean_t


@pytest.mark.analysis_errors
def test_a_raising_finding_builder_no_longer_silences_the_analysis(monkeypatch):
    """The issue's case: a finding builder that raised took the whole evaluation down and nothing fired.
    Now the curve detector fails alone: its failure pages, and a down source still pages too."""

    def broken(*args, **kw):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(findings, "leak", broken)
    a, trans = replay("staircase", lambda a: a.set_source(SourceStatus("engine:http://x", False, "refused")))
    assert a.analysis_errors["curve"] > 0 and set(a.analysis_errors) == {"curve"}
    assert ("GPUTelemetryDown", (("source", "analysis:curve"),)) in fired(trans)
    assert ("GPUTelemetryDown", (("source", "engine:http://x"),)) in fired(trans)
    assert "GPUMemoryLeak" not in names(trans)  # the one builder that fails is the one finding missing
    assert a.summary()["gpus"]["0"]["shape"] != "idle"  # the card's state still moved on


@pytest.mark.analysis_errors
def test_the_failure_clears_when_the_detector_recovers():
    state = {"fail": True}

    class Flaky:
        name = "flaky"
        per_card = False

        def run(self, ctx):
            if state["fail"]:
                raise KeyError("x")
            return []

    h, recs = read_trace(example("staircase.jsonl"))
    a = Analyzer(h.gpus)
    a.detectors.append(Flaky())
    trans = []
    samples = [r for _, r in recs if isinstance(r, Sample)]
    for i, s in enumerate(samples):
        if i == len(samples) // 3:
            state["fail"] = False
        trans += a.add_sample(s)
    key = ("GPUTelemetryDown", (("source", "analysis:flaky"),))
    states = [tr.state for tr in trans if (tr.alert.alertname, tr.alert.labels) == key]
    assert states == ["firing", "resolved"]
    assert a.analysis_errors["flaky"] > 0


@pytest.mark.parametrize("kind", ["stray", "telemetry_down"])
def test_builders_give_labels_the_spec_table_names(kind):
    from oomwatch.config import NODE_LABEL, SPECS

    if kind == "stray":
        _, c = findings.stray("0", "GPU-1", 5, None, 1.0, "orphaned", 0.0)
    else:
        _, c = findings.telemetry_down("nvml", "gone", 0.0)
    assert {k for k, _ in c.labels} == set(SPECS[c.alertname].labels) and NODE_LABEL not in SPECS[c.alertname].labels


@pytest.mark.parametrize("name", ["staircase", "stray", "tp_imbalance", "spike"])
def test_every_alert_raised_carries_the_labels_its_spec_names(name):
    from oomwatch.config import SPECS

    _, trans = replay(name)
    assert trans
    for tr in trans:
        assert [k for k, _ in tr.alert.labels] == sorted(SPECS[tr.alert.alertname].labels), tr.alert
        assert tr.alert.severity == SPECS[tr.alert.alertname].severity
