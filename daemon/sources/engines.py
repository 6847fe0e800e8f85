"""Read what an inference engine believes about its memory from its Prometheus /metrics.

vLLM first (both generations), SGLang, TGI and llama.cpp. The engine kind is detected from the metric
names; parsing uses prometheus_client's text parser. Every failure (refused, timeout, 404/500, an HTML
page, a truncated or huge body) becomes `EngineSnapshot(up=False, error=...)`: nothing here raises.

vLLM V0 (before ~0.9): `gpu_cache_usage_perc`, `num_requests_swapped`, `gpu_prefix_cache_hit_rate` (-1 off).
vLLM V1: `kv_cache_usage_perc`, `prefix_cache_{queries,hits}_total`, `_created` families, "None" labels.
Both: `cache_config_info` (gauge 1 whose labels are the cache config, `gpu_memory_utilization` among them).
SGLang: `token_usage` and per-pool `full_token_usage`/`swa_token_usage`/`mamba_usage`, the main pool's
`kv_used_tokens`/`kv_available_tokens`/`kv_evictable_tokens`, one series per `dp_rank` with DP attention.
llama.cpp: `requests_processing`/`requests_deferred`; `kv_cache_usage_ratio` only before llama.cpp #13660.
TGI: `tgi_queue_size`, `tgi_batch_current_size` (no KV gauge).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import EngineUrlError  # one line for the user; defined with the other user errors
from ..model import EngineSnapshot, SourceStatus
from ..redact import redact_text, redact_url

if TYPE_CHECKING:
    import ssl

    import httpx

Labels = dict[str, str]
Metrics = dict[str, list[tuple[Labels, float]]]  # sample name -> (labels, value) of each series

MAX_BODY_BYTES = 8 << 20  # a /metrics page larger than this is refused, not parsed


def metrics_url(url: str) -> str:
    """Accept a base URL or the full /metrics URL; check it is http(s) with a host. An error shows the URL
    redacted: it may carry credentials (`http://user:pw@host`, `?token=`)."""
    u = url if "://" in url else "http://" + url
    try:
        parts = urlsplit(u)
    except ValueError as e:  # an unclosed IPv6 bracket, control characters
        raise EngineUrlError(f"not a valid URL: {redact_url(url)!r} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineUrlError(f"not an http(s) URL: {redact_url(url)!r}")
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        raise EngineUrlError(f"bad port in URL: {redact_url(url)!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _flatten(text: str) -> Metrics:
    """Every sample by name; a value that is not a finite number (NaN, +Inf) is left out, so it reads as
    unknown (None) downstream rather than as a ratio or a count."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Metrics = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if isinstance(s.value, (int, float)) and math.isfinite(s.value):  # NaN, +Inf: unknown, left out
                out.setdefault(s.name, []).append((s.labels, float(s.value)))
    return out


def detect_kind(names: Iterable[str]) -> str | None:
    names = set(names)
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    if any(n.startswith("tgi_") for n in names):
        return "tgi"
    if any(n.startswith("llamacpp:") for n in names):
        return "llamacpp"
    return None


def _num(v: str | float | None) -> float | None:
    """A label's number (`gpu_memory_utilization="0.9"`), None when absent or not a finite number."""
    if v is None or v in ("None", "", "none", "null"):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _bool(v: str | None) -> bool | None:
    if v is None or v == "None":
        return None
    return str(v).lower() in ("true", "1", "yes")


def _first(m: Metrics, name: str, engine: str | None = None) -> tuple[float | None, Labels]:
    for labels, value in m.get(name, ()):
        if engine is None or labels.get("engine") == engine:
            return value, labels
    return None, {}


def _label_values(m: Metrics, prefix: str, label: str) -> list[str]:
    """The sorted distinct values of `label` across the series whose name starts with `prefix`."""
    return sorted({lab[label] for k, v in m.items() if k.startswith(prefix) for lab, _ in v if label in lab})


def _combined(url: str, kind: str, per: tuple[EngineSnapshot, ...], **extra: Any) -> EngineSnapshot:
    """One snapshot for data-parallel engines behind one URL: the fullest KV cache, the summed requests."""
    kvs = [e.kv_cache_usage_ratio for e in per if e.kv_cache_usage_ratio is not None]

    def total(attr: str) -> float | None:
        vals: list[float] = [getattr(e, attr) for e in per if getattr(e, attr) is not None]
        return sum(vals) if vals else None

    return EngineSnapshot(
        url=url,
        kind=kind,
        up=True,
        model=per[0].model,
        kv_cache_usage_ratio=max(kvs) if kvs else None,
        requests_running=total("requests_running"),
        requests_waiting=total("requests_waiting"),
        preemptions_total=total("preemptions_total"),
        engines=per,
        **extra,
    )


def _vllm(url: str, m: Metrics) -> EngineSnapshot:
    engines = _label_values(m, "vllm:", "engine")
    cfg_labels = (m.get("vllm:cache_config_info") or [({}, 0)])[0][0]
    util = _num(cfg_labels.get("gpu_memory_utilization"))
    blocks = _num(cfg_labels.get("num_gpu_blocks"))
    bsize = _num(cfg_labels.get("block_size"))
    kvb = _num(cfg_labels.get("kv_cache_memory_bytes"))
    common: dict[str, Any] = dict(
        gpu_memory_utilization=util,
        num_gpu_blocks=None if blocks is None else int(blocks),
        block_size=None if bsize is None else int(bsize),
        cache_dtype=cfg_labels.get("cache_dtype") if cfg_labels.get("cache_dtype") not in (None, "None") else None,
        prefix_caching=_bool(cfg_labels.get("enable_prefix_caching")),
        kv_cache_memory_bytes=None if kvb is None else int(kvb),
    )

    def one(engine: str | None) -> EngineSnapshot:
        kv, labels = _first(m, "vllm:kv_cache_usage_perc", engine)
        if kv is None:
            kv, labels = _first(m, "vllm:gpu_cache_usage_perc", engine)
        hit = None
        q, _ = _first(m, "vllm:prefix_cache_queries_total", engine)
        h, _ = _first(m, "vllm:prefix_cache_hits_total", engine)
        if q:
            hit = (h or 0.0) / q
        else:
            r, _ = _first(m, "vllm:gpu_prefix_cache_hit_rate", engine)
            hit = r if r is not None and r >= 0 else None
        return EngineSnapshot(
            url=url,
            kind="vllm",
            up=True,
            model=labels.get("model_name"),
            engine=engine,
            kv_cache_usage_ratio=kv,
            requests_running=_first(m, "vllm:num_requests_running", engine)[0],
            requests_waiting=_first(m, "vllm:num_requests_waiting", engine)[0],
            requests_swapped=_first(m, "vllm:num_requests_swapped", engine)[0],
            preemptions_total=_first(m, "vllm:num_preemptions_total", engine)[0],
            prefix_cache_hit_ratio=hit,
            **common,
        )

    if len(engines) <= 1:
        return one(engines[0] if engines else None)
    per = tuple(one(e) for e in engines)
    return _combined(url, "vllm", per, prefix_cache_hit_ratio=per[0].prefix_cache_hit_ratio, **common)


# SGLang's memory pools (python/sglang/srt/observability/metrics_collector.py): the ratio of each pool
# that exists (a hybrid model has a sliding-window or a Mamba pool beside the full KV pool; the others read
# 0), and the token counts of the main pool. Pressure is the fullest pool, as SGLang's scheduler judges it.
_SGLANG_POOLS = (
    ("full", "sglang:full_token_usage"),
    ("swa", "sglang:swa_token_usage"),
    ("mamba", "sglang:mamba_usage"),
)


def _sglang(url: str, m: Metrics) -> EngineSnapshot:
    ranks = _label_values(m, "sglang:", "dp_rank")

    def one(rank: str | None) -> EngineSnapshot:
        def g(name: str) -> float | None:
            vals = [v for lab, v in m.get(name, ()) if rank is None or lab.get("dp_rank") == rank]
            return max(vals) if vals else None  # TP ranks of one engine report the same pool

        usage = g("sglang:token_usage")
        labels: Labels = next(iter(lab for lab, _ in m.get("sglang:token_usage", ())), {})
        pools = tuple((n, r) for n, name in _SGLANG_POOLS if (r := g(name)) is not None)
        used, avail = g("sglang:kv_used_tokens"), g("sglang:kv_available_tokens")
        evict = g("sglang:kv_evictable_tokens")
        if usage is None and used is not None and avail is not None:
            total = used + avail + (evict or 0.0)
            usage = used / total if total else None
        if usage is None:
            used_n, cap = g("sglang:num_used_tokens"), g("sglang:max_total_num_tokens")
            usage = used_n / cap if used_n is not None and cap else None
        ratios = [r for r in [usage, *(r for n, r in pools if n != "full")] if r is not None]
        model = labels.get("model_name") or next(
            (lab.get("model_name") for k, v in m.items() if k.startswith("sglang:") for lab, _ in v), None
        )
        kvgb = g("sglang:kv_cache_memory_usage_gb")
        return EngineSnapshot(
            url=url,
            kind="sglang",
            up=True,
            model=model,
            engine=rank,
            kv_cache_usage_ratio=max(ratios) if ratios else None,
            requests_running=g("sglang:num_running_reqs"),
            requests_waiting=g("sglang:num_queue_reqs"),
            preemptions_total=g("sglang:num_retracted_requests_total"),
            prefix_cache_hit_ratio=g("sglang:cache_hit_rate"),
            kv_cache_memory_bytes=None if kvgb is None else int(kvgb * 1e9),
            kv_pools=pools,
        )

    if len(ranks) <= 1:
        return one(ranks[0] if ranks else None)
    return _combined(url, "sglang", tuple(one(r) for r in ranks))


def _tgi(url: str, m: Metrics) -> EngineSnapshot:
    return EngineSnapshot(
        url=url,
        kind="tgi",
        up=True,
        requests_running=_first(m, "tgi_batch_current_size")[0],
        requests_waiting=_first(m, "tgi_queue_size")[0],
    )


def _llamacpp(url: str, m: Metrics) -> EngineSnapshot:
    # llama-server exported its KV use until ggml-org/llama.cpp#13660; current servers do not, so the ratio
    # is None there (unknown, never 0) and KVCachePressure cannot be judged for them.
    kv, _ = _first(m, "llamacpp:kv_cache_usage_ratio")
    return EngineSnapshot(
        url=url,
        kind="llamacpp",
        up=True,
        kv_cache_usage_ratio=kv,
        requests_running=_first(m, "llamacpp:requests_processing")[0],
        requests_waiting=_first(m, "llamacpp:requests_deferred")[0],
    )


def parse_metrics(url: str, text: str) -> EngineSnapshot:
    """Normalise one exposition. A parse error or an unknown engine is a down snapshot, not an exception."""
    try:
        m = _flatten(text)
    except Exception as e:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on garbage
        return EngineSnapshot(url, up=False, error=f"unparsable metrics: {type(e).__name__}: {str(e)[:80]}")
    kind = detect_kind(m)
    if kind is None:
        return EngineSnapshot(url, up=False, error="no vLLM, SGLang, TGI or llama.cpp metrics in the answer")
    try:
        return {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "llamacpp": _llamacpp}[kind](url, m)
    except (ValueError, OverflowError, TypeError, ZeroDivisionError) as e:  # a count too large for an int
        return EngineSnapshot(url, up=False, error=f"impossible values in metrics: {type(e).__name__}: {str(e)[:80]}")


#: One scrape's whole budget by default: connect, headers, body and every retry together.
DEFAULT_TIMEOUT_S = 2.0
#: How often a wait for a scrape looks at its stop event (a clean stop never waits out a slow endpoint).
STOP_POLL_S = 0.05


class _DeadlineError(Exception):
    """The scrape's total budget ran out (raised between chunks of a slow body)."""


class _Scrape:
    """One scrape in flight on its own daemon thread; the caller waits for it only until the deadline.

    A worker of its own per scrape, not the scheduler's thread: name resolution and a body that drips one
    byte a second are not bounded by httpx's per-read timeout, and must hold up neither the caller nor a
    clean stop. At most one is in flight per source: a hung one is reported, never piled up.
    """

    def __init__(self, run: Any, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.result: EngineSnapshot | None = None
        self._run = run
        self.thread = threading.Thread(target=self._main, name="oomwatch-engine-scrape", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.result = self._run(self.deadline)
        except Exception as e:  # noqa: BLE001 - a worker's exception would print a traceback; it is a reason
            self.result = EngineSnapshot("", up=False, error=f"{type(e).__name__}: {redact_text(str(e))[:120]}")
        finally:
            self.done.set()

    def wait(self, stop: threading.Event | None = None) -> bool:
        """Wait until the scrape is done, its deadline passes or `stop` is set; True when done."""
        while not self.done.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                return self.done.is_set()
            self.done.wait(min(STOP_POLL_S, left))
        return True


class EngineSource:
    """Scrapes one engine endpoint within one total deadline (`timeout_s`: connect, headers, body, size and
    retries with backoff together), on a worker thread of its own, so nothing waits longer than that."""

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = 2,
        backoff_s: float = 0.2,
        client: httpx.Client | None = None,
        auth: httpx.Auth | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        """`auth` and `verify` are httpx's (oomwatch.credentials.ClientAuth builds them from the credential
        flags); a given `client` is used as it is."""
        self.url = metrics_url(url)  # raises EngineUrlError
        self._auth, self._verify = auth, verify
        self.shown = redact_url(self.url)  # what names, logs and snapshots carry: never its credentials
        self.name = f"engine:{self.shown}"
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._client = client
        self._inflight: _Scrape | None = None
        self.last = EngineSnapshot(self.shown, up=False, error="not scraped yet")
        self.status = SourceStatus(self.name, False, "not scraped yet")

    def _client_(self) -> httpx.Client:
        if self._client is None:
            import httpx

            # A redirect to another host drops the Authorization header (httpx does), so credentials never
            # follow a redirect off the engine.
            self._client = httpx.Client(
                timeout=self.timeout_s, follow_redirects=True, auth=self._auth, verify=self._verify
            )
        return self._client

    def _get(self, deadline: float) -> str:
        """The body, or an exception; each httpx timeout is what is left of the budget, and the budget is
        checked again after every chunk (a drip of one byte a second never times out a single read)."""
        import httpx

        left = deadline - time.monotonic()
        if left <= 0:
            raise _DeadlineError
        with self._client_().stream(
            "GET", self.url, headers={"Accept": "text/plain"}, timeout=httpx.Timeout(left)
        ) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}")
            ctype = r.headers.get("content-type", "")
            if "html" in ctype:
                raise RuntimeError("answered an HTML page, not Prometheus metrics")
            chunks: list[bytes] = []
            size = 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise RuntimeError(f"body larger than {MAX_BODY_BYTES >> 20} MiB")
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise _DeadlineError
        return b"".join(chunks).decode("utf-8", errors="replace")

    def _timed_out(self) -> str:
        return f"timed out: no complete answer within the {self.timeout_s:g} s timeout"

    def _attempts(self, deadline: float) -> EngineSnapshot:
        """The scrape itself (on the worker): attempts with backoff until one answers or the budget is spent."""
        import httpx

        snap = EngineSnapshot(self.shown, up=False, error=self._timed_out())
        for attempt in range(self.retries + 1):
            try:
                text = self._get(deadline)
                if text.lstrip().startswith("<"):
                    raise RuntimeError("answered an HTML page, not Prometheus metrics")
                return parse_metrics(self.shown, text)  # parsed, or unparsable: a retry gets the same body
            except _DeadlineError:
                return EngineSnapshot(self.shown, up=False, error=self._timed_out())
            except (httpx.HTTPError, httpx.InvalidURL, RuntimeError, OSError, ValueError) as e:
                snap = EngineSnapshot(self.shown, up=False, error=_describe(e))
                pause = self.backoff_s * (2**attempt)
                if attempt == self.retries or time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
        return snap

    def begin(self) -> None:
        """Start a scrape on its worker unless one is still in flight (a hung endpoint gets no second one)."""
        if self._inflight is None:
            self._inflight = _Scrape(self._attempts, time.monotonic() + self.timeout_s)

    def collect(self, stop: threading.Event | None = None) -> EngineSnapshot:
        """The snapshot of the scrape begun last: its answer, or down with 'timed out' once its deadline has
        passed (the worker is left to end by itself), or the last snapshot as it stands when `stop` is set."""
        job = self._inflight
        if job is None:
            return self.last
        t0 = job.deadline - self.timeout_s
        if job.wait(stop):
            self._inflight = None
            snap = job.result or EngineSnapshot(self.shown, up=False, error="no answer")
            if not snap.url:
                snap = EngineSnapshot(self.shown, up=False, error=snap.error)
        elif time.monotonic() >= job.deadline:
            snap = EngineSnapshot(self.shown, up=False, error=self._timed_out())
        else:  # stopping: report nothing new
            return self.last
        self.last = snap
        took = min(time.monotonic(), job.deadline) - t0
        self.status = SourceStatus(self.name, snap.up, None if snap.up else snap.error, took)
        return snap

    def scrape(self, stop: threading.Event | None = None) -> EngineSnapshot:
        """One scrape, returned within `timeout_s` whatever the endpoint does."""
        self.begin()
        return self.collect(stop)

    cards: tuple[()] = ()  # the `Source` protocol: an engine reports no card of its own

    def poll(self, now: float | None = None) -> list[object]:
        """The `Source` protocol: one scrape (its EngineSnapshot)."""
        return [self.scrape()]

    def close(self, wait_s: float = 0.0) -> None:
        """Close the client. A scrape still in flight is waited for at most `wait_s` (a clean stop is prompt),
        then left: its daemon thread ends by itself at its deadline plus at most one read timeout."""
        job = self._inflight
        if job is not None and wait_s > 0:
            job.done.wait(wait_s)
        if self._client is not None:
            self._client.close()


# What getaddrinfo's failures say (glibc, musl, macOS): a name that does not resolve is no refused port.
_DNS_WORDS = (
    "name or service not known",
    "temporary failure in name resolution",
    "nodename nor servname",
    "no address associated",
    "name does not resolve",
    "errno -2",
    "errno -3",
    "errno -5",
    "errno 8",
    "getaddrinfo failed",
)


def _describe(e: Exception) -> str:
    import httpx

    if isinstance(e, httpx.ConnectError):
        text = str(e).lower()
        if any(w in text for w in _DNS_WORDS):
            return "name not resolved (DNS): check the host name"
        if "refused" in text:
            return "connection refused (nothing listens on that port)"
        if "ssl" in text or "certificate" in text:  # an untrusted certificate (--engine-ca-file), no TLS there
            return f"TLS failed: {redact_text(str(e))[:140]}"
        return "connection refused or host unreachable"
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    return redact_text(str(e))[:160] or type(e).__name__  # httpx names the URL in some errors
