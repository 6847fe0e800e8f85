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

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import EngineUrlError  # one line for the user; defined with the other user errors
from ..model import EngineSnapshot, SourceStatus

if TYPE_CHECKING:
    import httpx

Labels = dict[str, str]
Metrics = dict[str, list[tuple[Labels, float]]]  # sample name -> (labels, value) of each series

MAX_BODY_BYTES = 8 << 20  # a /metrics page larger than this is refused, not parsed


def metrics_url(url: str) -> str:
    """Accept a base URL or the full /metrics URL; check it is http(s) with a host."""
    u = url if "://" in url else "http://" + url
    try:
        parts = urlsplit(u)
    except ValueError as e:  # an unclosed IPv6 bracket, control characters
        raise EngineUrlError(f"not a valid URL: {url!r} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineUrlError(f"not an http(s) URL: {url!r}")
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        raise EngineUrlError(f"bad port in URL: {url!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _flatten(text: str) -> Metrics:
    from prometheus_client.parser import text_string_to_metric_families

    out: Metrics = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
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
    if v is None or v in ("None", "", "none", "null"):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


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
    return {"vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "llamacpp": _llamacpp}[kind](url, m)


class EngineSource:
    """Scrapes one engine endpoint with a timeout, a bounded body and retries with backoff."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 2.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        client: httpx.Client | None = None,
    ):
        self.url = metrics_url(url)  # raises EngineUrlError
        self.name = f"engine:{self.url}"
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._client = client
        self.last = EngineSnapshot(self.url, up=False, error="not scraped yet")
        self.status = SourceStatus(self.name, False, "not scraped yet")

    def _client_(self) -> httpx.Client:
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
            chunks: list[bytes] = []
            size = 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise RuntimeError(f"body larger than {MAX_BODY_BYTES >> 20} MiB")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def scrape(self) -> EngineSnapshot:
        import httpx

        t0 = time.perf_counter()
        err: str | None = None
        snap = EngineSnapshot(self.url, up=False, error="not scraped")  # replaced on the first attempt
        for attempt in range(self.retries + 1):
            try:
                text = self._get()
                if text.lstrip().startswith("<"):
                    raise RuntimeError("answered an HTML page, not Prometheus metrics")
                snap = parse_metrics(self.url, text)
                err = snap.error
                break  # parsed, or unparsable: a retry now would get the same body
            except (httpx.HTTPError, httpx.InvalidURL, RuntimeError, OSError, ValueError) as e:
                err = _describe(e)
                snap = EngineSnapshot(self.url, up=False, error=err)
                if attempt < self.retries:
                    time.sleep(self.backoff_s * (2**attempt))
        self.last = snap
        self.status = SourceStatus(self.name, snap.up, err if not snap.up else None, time.perf_counter() - t0)
        return snap

    cards: tuple[()] = ()  # the `Source` protocol: an engine reports no card of its own

    def poll(self, now: float | None = None) -> list[object]:
        """The `Source` protocol: one scrape (its EngineSnapshot)."""
        return [self.scrape()]

    def close(self) -> None:
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
        return "connection refused or host unreachable"
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    return str(e)[:160] or type(e).__name__
