"""Read what an inference engine believes about its memory from its Prometheus /metrics.

vLLM first (both generations), SGLang, TGI and llama.cpp. The engine kind is detected from the metric
names; parsing uses prometheus_client's text parser. Every failure (refused, timeout, 404/500, an HTML
page, a truncated or huge body) becomes `EngineSnapshot(up=False, error=...)`: nothing here raises.

vLLM V0 (before ~0.9): `gpu_cache_usage_perc`, `num_requests_swapped`, `gpu_prefix_cache_hit_rate` (-1 off).
vLLM V1: `kv_cache_usage_perc`, `prefix_cache_{queries,hits}_total`, `_created` families, "None" labels.
Both: `cache_config_info` (gauge 1 whose labels are the cache config, `gpu_memory_utilization` among them).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

from ..model import EngineSnapshot, SourceStatus

MAX_BODY_BYTES = 8 << 20  # a /metrics page larger than this is refused, not parsed


class EngineUrlError(ValueError):
    """A URL that cannot be an engine endpoint (one line for the user)."""


def metrics_url(url: str) -> str:
    """Accept a base URL or the full /metrics URL; check it is http(s) with a host."""
    u = url if "://" in url else "http://" + url
    parts = urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineUrlError(f"not an http(s) URL: {url!r}")
    try:
        parts.port
    except ValueError:
        raise EngineUrlError(f"bad port in URL: {url!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _flatten(text: str) -> dict[str, list[tuple[dict, float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def detect_kind(names) -> str | None:
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


def _num(v):
    if v is None or v in ("None", "", "none", "null"):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _bool(v):
    if v is None or v == "None":
        return None
    return str(v).lower() in ("true", "1", "yes")


def _first(m, name, engine=None):
    for labels, value in m.get(name, ()):
        if engine is None or labels.get("engine") == engine:
            return value, labels
    return None, {}


def _vllm(url: str, m) -> EngineSnapshot:
    engines = sorted({lab.get("engine") for k, v in m.items() if k.startswith("vllm:") for lab, _ in v} - {None})
    cfg_labels = (m.get("vllm:cache_config_info") or [({}, 0)])[0][0]
    util = _num(cfg_labels.get("gpu_memory_utilization"))
    blocks = _num(cfg_labels.get("num_gpu_blocks"))
    bsize = _num(cfg_labels.get("block_size"))
    kvb = _num(cfg_labels.get("kv_cache_memory_bytes"))
    common = dict(
        gpu_memory_utilization=util,
        num_gpu_blocks=None if blocks is None else int(blocks),
        block_size=None if bsize is None else int(bsize),
        cache_dtype=cfg_labels.get("cache_dtype") if cfg_labels.get("cache_dtype") not in (None, "None") else None,
        prefix_caching=_bool(cfg_labels.get("enable_prefix_caching")),
        kv_cache_memory_bytes=None if kvb is None else int(kvb),
    )

    def one(engine):
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
    kvs = [e.kv_cache_usage_ratio for e in per if e.kv_cache_usage_ratio is not None]

    def total(attr):
        vals = [getattr(e, attr) for e in per if getattr(e, attr) is not None]
        return sum(vals) if vals else None

    return EngineSnapshot(
        url=url, kind="vllm", up=True, model=per[0].model, engine=None,
        kv_cache_usage_ratio=max(kvs) if kvs else None,
        requests_running=total("requests_running"), requests_waiting=total("requests_waiting"),
        preemptions_total=total("preemptions_total"), prefix_cache_hit_ratio=per[0].prefix_cache_hit_ratio,
        engines=per, **common,
    )


def _sglang(url, m) -> EngineSnapshot:
    usage, labels = _first(m, "sglang:token_usage")
    if usage is None:
        used, _ = _first(m, "sglang:num_used_tokens")
        cap, _ = _first(m, "sglang:max_total_num_tokens")
        usage = used / cap if used is not None and cap else None
    return EngineSnapshot(
        url=url, kind="sglang", up=True, model=labels.get("model_name"),
        kv_cache_usage_ratio=usage,
        requests_running=_first(m, "sglang:num_running_reqs")[0],
        requests_waiting=_first(m, "sglang:num_queue_reqs")[0],
        prefix_cache_hit_ratio=_first(m, "sglang:cache_hit_rate")[0],
    )


def _tgi(url, m) -> EngineSnapshot:
    return EngineSnapshot(
        url=url, kind="tgi", up=True,
        requests_running=_first(m, "tgi_batch_current_size")[0],
        requests_waiting=_first(m, "tgi_queue_size")[0],
    )


def _llamacpp(url, m) -> EngineSnapshot:
    kv, _ = _first(m, "llamacpp:kv_cache_usage_ratio")
    return EngineSnapshot(
        url=url, kind="llamacpp", up=True, kv_cache_usage_ratio=kv,
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
    return {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "llamacpp": _llamacpp}[kind](url, m)


class EngineSource:
    """Scrapes one engine endpoint with a timeout, a bounded body and retries with backoff."""

    def __init__(self, url: str, timeout_s: float = 2.0, retries: int = 2, backoff_s: float = 0.2, client=None):
        self.url = metrics_url(url)  # raises EngineUrlError
        self.name = f"engine:{self.url}"
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._client = client
        self.last = EngineSnapshot(self.url, up=False, error="not scraped yet")
        self.status = SourceStatus(self.name, False, "not scraped yet")

    def _client_(self):
        if self._client is None:
            import httpx

            self._client = httpx.Client(timeout=self.timeout_s, follow_redirects=True)
        return self._client

    def _get(self) -> str:
        with self._client_().stream("GET", self.url, headers={"Accept": "text/plain"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}")
            ctype = r.headers.get("content-type", "")
            if "html" in ctype:
                raise RuntimeError("answered an HTML page, not Prometheus metrics")
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise RuntimeError(f"body larger than {MAX_BODY_BYTES >> 20} MiB")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def scrape(self) -> EngineSnapshot:
        import httpx

        t0 = time.perf_counter()
        err = None
        for attempt in range(self.retries + 1):
            try:
                text = self._get()
                if text.lstrip().startswith("<"):
                    raise RuntimeError("answered an HTML page, not Prometheus metrics")
                snap = parse_metrics(self.url, text)
                err = snap.error
                break  # parsed, or unparsable: a retry now would get the same body
            except (httpx.HTTPError, RuntimeError, OSError) as e:
                err = _describe(e)
                snap = EngineSnapshot(self.url, up=False, error=err)
                if attempt < self.retries:
                    time.sleep(self.backoff_s * (2**attempt))
        self.last = snap
        self.status = SourceStatus(self.name, snap.up, err if not snap.up else None, time.perf_counter() - t0)
        return snap

    def close(self):
        if self._client is not None:
            self._client.close()


def _describe(e: Exception) -> str:
    import httpx

    if isinstance(e, httpx.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    return str(e)[:160] or type(e).__name__
