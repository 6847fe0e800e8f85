"""Label values that may carry a URL, as they may be shown: no credentials in a series or a pushed alert.

An engine URL (`http://user:token@host/metrics`), an Alertmanager URL, and the source and sink names
built from them (`engine:URL`, `alertmanager:URL`) end up in labels, which every Prometheus user and
every receiver of a page can read. Both the exposition and the Alertmanager push pass them through
`shown`, so the rule-evaluated copy of an alert and the pushed one still carry the same label value.
"""

from __future__ import annotations

from oomwatch.redact import redact_url

__all__ = ["URL_LABELS", "shown"]

#: Labels whose values are a URL or a `kind:URL` name.
URL_LABELS = frozenset({"url", "source", "sink"})


def shown(value: str) -> str:
    """`value` with the credentials of the URL in it hidden: a URL, or a name `kind:URL`."""
    kind, sep, rest = value.partition(":")
    if sep and "://" in rest and "://" not in kind + ":":
        return f"{kind}:{redact_url(rest)}"
    return redact_url(value) if "://" in value else value
