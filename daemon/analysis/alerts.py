"""Alert states with `for` and hysteresis: inactive -> pending -> firing -> resolved.

A condition must hold for the alert's `for` before it fires (no page for one odd sample), and a firing
alert resolves only after its condition has been false for `clear_s` (no flapping on a noisy curve).
Pure bookkeeping over times passed in; the daemon, `replay` and `diagnose` share it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from ..config import SPECS, AlertTiming, runbook_url


@dataclass(frozen=True, slots=True)
class Condition:
    """An alert's condition being true now, with what the page should say."""

    alertname: str
    labels: tuple[tuple[str, str], ...]  # besides alertname and severity; sorted
    summary: str
    description: str
    eta_seconds: float | None = None
    value: float = 1.0


@dataclass
class Alert:
    alertname: str
    labels: tuple[tuple[str, str], ...]
    state: str = "pending"  # pending | firing | resolved
    active_since: float = 0.0
    fired_at: float | None = None
    resolved_at: float | None = None
    last_true: float = 0.0
    summary: str = ""
    description: str = ""
    eta_seconds: float | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return SPECS[self.alertname].severity

    def all_labels(self) -> dict[str, str]:
        d = {"alertname": self.alertname, "severity": self.severity}
        d.update(self.labels)
        return d

    def all_annotations(self) -> dict[str, str]:
        d = {"summary": self.summary, "description": self.description, "runbook_url": runbook_url(self.alertname)}
        d.update(self.annotations)
        return d


@dataclass(frozen=True, slots=True)
class Transition:
    t: float
    alert: Alert
    state: str  # firing | resolved


class AlertBook:
    """Keeps every alert instance's state; `update` returns the transitions of this evaluation."""

    def __init__(self, timing: AlertTiming | None = None):
        self.timing = timing or AlertTiming()
        self.alerts: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}

    def update(
        self, now: float, conditions: Iterable[Condition], scope: Container[str] | None = None
    ) -> list[Transition]:
        """Apply this evaluation's true conditions. `scope` limits which alert names are judged now
        (a source that was not evaluated this round keeps its alerts as they are)."""
        out: list[Transition] = []
        seen = set()
        for c in conditions:
            key = (c.alertname, c.labels)
            seen.add(key)
            a = self.alerts.get(key)
            if a is None or a.state == "resolved":
                a = Alert(c.alertname, c.labels, active_since=now)
                self.alerts[key] = a
            a.last_true = now
            a.summary, a.description, a.eta_seconds = c.summary, c.description, c.eta_seconds
            if a.state == "pending" and now - a.active_since >= self.timing.for_s.get(c.alertname, 0.0):
                a.state = "firing"
                a.fired_at = now
                out.append(Transition(now, a, "firing"))
        for key, a in list(self.alerts.items()):
            if key in seen or (scope is not None and a.alertname not in scope):
                continue
            if a.state == "pending":
                del self.alerts[key]
            elif a.state == "firing" and now - a.last_true >= self.timing.clear_by_alert.get(
                a.alertname, self.timing.clear_s
            ):
                a.state = "resolved"
                a.resolved_at = now
                out.append(Transition(now, a, "resolved"))
        return out

    def end(self, now: float, alertnames: Container[str], gpu: str) -> list[Transition]:
        """Resolve at once the named alerts of one card (its process exited: the episode is over)."""
        out = []
        for a in self.alerts.values():
            if a.state == "firing" and a.alertname in alertnames and dict(a.labels).get("gpu") == gpu:
                a.state, a.resolved_at = "resolved", now
                out.append(Transition(now, a, "resolved"))
        return out

    def firing(self) -> list[Alert]:
        return [a for a in self.alerts.values() if a.state == "firing"]

    def resolve_all(self, now: float) -> list[Transition]:
        """Resolve every firing alert and drop pending ones: the input ended (a replay without --loop), so
        no condition holds any more and nothing must stay paged."""
        out: list[Transition] = []
        for key, a in list(self.alerts.items()):
            if a.state == "pending":
                del self.alerts[key]
            elif a.state == "firing":
                a.state = "resolved"
                a.resolved_at = now
                out.append(Transition(now, a, "resolved"))
        return out

    def prune(self, now: float, keep_resolved_s: float = 300.0) -> None:
        """Forget resolved alerts after a while so churned PIDs cannot grow the book."""
        for key, a in list(self.alerts.items()):
            if a.state == "resolved" and a.resolved_at is not None and now - a.resolved_at > keep_resolved_s:
                del self.alerts[key]
