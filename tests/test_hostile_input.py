# ruff: noqa: UP031 - JSON text templates: %-formatting keeps the braces of the JSON readable
"""#22: every reader at the edge (traces, state files, probe files, engine bodies) takes generated hostile
input without a traceback: it raises only the project's own errors (one line for the user) or skips what it
cannot use, and never lets a number that is not finite, or a byte count outside [0, total], through."""

import json
import logging
import math
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomwatch import state
from oomwatch.analysis.analyzer import Analyzer
from oomwatch.errors import OomwatchError
from oomwatch.model import AllocSample, GpuInfo, ProcInfo, RssSample, Sample
from oomwatch.sources.allocator import AllocatorSource
from oomwatch.sources.engines import parse_metrics
from oomwatch.trace import read_trace

EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
UUID = "GPU-hostile-0"
TOTAL = 80 << 30

# JSON number tokens and other values as they appear in hostile files: Python's json reads Infinity, NaN and
# 1e400 (as inf) without complaint, and a 400-digit integer as a bigint.
NUMBERS = st.one_of(
    st.sampled_from(
        ["0", "-1", "-4", "1e400", "-1e400", "Infinity", "-Infinity", "NaN", "1e308", str(10**400), "-0.0", "2.5"]
    ),
    st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
VALUES = st.one_of(NUMBERS, st.sampled_from(["true", "null", '"x"', "[]", "{}", '"1e3"', "[1,2]"]))
DEEP = st.integers(min_value=40, max_value=100_000).map(lambda n: "[" * n)
GARBAGE = st.one_of(DEEP, st.text(max_size=40), st.sampled_from(["{", '{"t":', "\x00", "]]]", '{"gpus": 5, "t": 1}']))


def finite_bytes(v, total=None):
    return v is None or (isinstance(v, int) and v >= 0 and (total is None or v <= total))


@st.composite
def trace_texts(draw):
    total = draw(st.one_of(st.just(str(TOTAL)), VALUES))
    header = '{"format":"gpu-memory-trace/1","gpus":[{"index":0,"name":"g","uuid":"%s","total":%s}]}' % (UUID, total)
    if draw(st.booleans()) and draw(st.booleans()):
        header = draw(st.one_of(DEEP, GARBAGE))
    lines = [header]
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["sample", "sample", "proc", "alloc", "rss", "garbage"]))
        v = [draw(VALUES) for _ in range(5)]
        lines.append(
            {
                "sample": '{"t":%s,"gpus":[{"i":0,"used":%s,"free":%s,"util":%s,"procs":[[7,%s]]}]}' % tuple(v),
                "proc": '{"t":%s,"event":"proc","pid":7,"name":"x","cmdline":["a"],"ppid":%s,"create_time":%s,'
                '"rss":%s}' % tuple(v[:4]),
                "alloc": '{"t":%s,"alloc":[{"pid":7,"uuid":"u","allocated":%s,"reserved":%s,"ooms":%s}]}'
                % tuple(v[:4]),
                "rss": '{"t":%s,"rss":[[7,%s]],"limit":{"bytes":%s}}' % tuple(v[:3]),
                "garbage": draw(GARBAGE),
            }[kind]
        )
    return "\n".join(lines) + "\n"


@EXAMPLES
@given(trace_texts())
def test_hostile_traces_raise_only_trace_errors_and_yield_only_finite_numbers(text):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.jsonl")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            header, it = read_trace(p, warn=False)
            recs = list(it)
        except OomwatchError as e:
            assert "\n" not in str(e)
            return
    totals = {g.index: g.total_bytes for g in header.gpus}
    assert all(isinstance(t, int) and t > 0 for t in totals.values())
    last = -math.inf
    for t, r in recs:
        assert math.isfinite(t)
        if isinstance(r, Sample):
            assert r.t >= last  # time never runs backwards
            last = r.t
            for g in r.gpus:
                cap = totals.get(g.index)
                assert finite_bytes(g.used_bytes, cap) and finite_bytes(g.free_bytes, cap)
                assert all(finite_bytes(b, cap) for _, b in g.procs)
        elif isinstance(r, ProcInfo):
            assert r.create_time is None or math.isfinite(r.create_time)
            assert finite_bytes(r.rss_bytes)
        elif isinstance(r, RssSample):
            assert all(finite_bytes(b) for _, b in r.rss) and finite_bytes(r.limit_bytes)
        else:
            assert all(isinstance(a, AllocSample) and finite_bytes(a.allocated_bytes) for a in r)


def _state_doc(draw):
    """A state file: garbage, a deep nest, or an oomwatch-state/1 document with hostile values in it."""
    good = {
        "format": "oomwatch-state/1",
        "uuid": UUID,
        "clock_offset": 0.0,
        "levels": [list(lv) for lv in Analyzer((GpuInfo(0, "g", UUID, TOTAL),)).cfg.history_levels],
    }
    text = json.dumps(good)
    nan_col = "AAAAAAAA+H8="  # one float64 NaN, base64
    choice = draw(st.integers(0, 4))
    if choice == 0:
        return draw(GARBAGE)
    if choice == 1:
        return text[:-1] + ', "history": ' + "[" * draw(st.integers(40, 50_000)) + "}"
    if choice == 2:
        return text[:-1] + ', "clock_offset": %s, "history": []}' % draw(VALUES)
    col = draw(st.sampled_from([nan_col, "!!notbase64", "", "AAAAAAAA8D8="]))
    levels = [{"bucket_s": b, "t": col, "min": col, "max": col, "last": col} for b, _ in good["levels"]]
    return text[:-1] + ', "history": %s}' % json.dumps(levels)


@EXAMPLES
@given(st.data())
def test_hostile_state_files_are_set_aside_never_fatal(data):
    doc = _state_doc(data.draw)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, UUID + ".json"), "w", encoding="utf-8") as f:
            f.write(doc)
        a = Analyzer((GpuInfo(0, "g", UUID, TOTAL),))
        state.load(a, d)  # never raises
        for ring in a.gpus[0].history.levels:
            for col in ring.arrays():
                assert all(math.isfinite(x) for x in col.tolist())


@EXAMPLES
@given(st.lists(st.tuples(VALUES, VALUES, VALUES, VALUES), min_size=1, max_size=4), GARBAGE)
def test_hostile_probe_files_yield_only_finite_counts(docs, garbage):
    with tempfile.TemporaryDirectory() as d:
        for i, (t, iv, allocated, retries) in enumerate(docs):
            with open(os.path.join(d, f"{100 + i}.json"), "w", encoding="utf-8") as f:
                f.write(
                    '{"format":"oomwatch-probe/1","pid":%d,"time":%s,"interval_s":%s,"devices":[{"uuid":"%s",'
                    '"allocated_bytes":%s,"reserved_bytes":%s,"alloc_retries":%s}]}'
                    % (100 + i, t, iv, UUID, allocated, allocated, retries)
                )
        with open(os.path.join(d, "99.json"), "w", encoding="utf-8") as f:
            f.write(garbage)
        src = AllocatorSource([GpuInfo(0, "g", UUID, TOTAL)], d, clock=lambda: 1000.0, pid_alive=lambda p: True)
        for a in src.poll(1.0):
            assert finite_bytes(a.allocated_bytes) and finite_bytes(a.reserved_bytes)
            assert finite_bytes(a.alloc_retries)


ENGINE_LINES = st.sampled_from(
    [
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} %s',
        "vllm:num_requests_waiting %s",
        'vllm:cache_config_info{gpu_memory_utilization="%s",num_gpu_blocks="%s",block_size="16"} 1',
        "sglang:token_usage %s",
        "sglang:kv_cache_memory_usage_gb %s",
        'sglang:kv_used_tokens{dp_rank="0"} %s',
        'sglang:kv_available_tokens{dp_rank="0"} %s',
        "tgi_queue_size %s",
        "llamacpp:kv_cache_usage_ratio %s",
        "{{{ not metrics",
    ]
)


@EXAMPLES
@given(st.lists(st.tuples(ENGINE_LINES, NUMBERS, NUMBERS), max_size=8))
def test_hostile_engine_bodies_give_a_snapshot_with_finite_numbers(rows):
    text = "\n".join(line.replace("%s", a, 1).replace("%s", b, 1) for line, a, b in rows) + "\n"
    s = parse_metrics("http://u/metrics", text)
    for e in (s, *s.engines):
        for name in (
            "kv_cache_usage_ratio",
            "requests_running",
            "requests_waiting",
            "preemptions_total",
            "gpu_memory_utilization",
            "prefix_cache_hit_ratio",
        ):
            v = getattr(e, name)
            assert v is None or math.isfinite(v), (name, v, text)


def test_a_hundred_thousand_brackets_never_raise_recursion_error(tmp_path, caplog):
    head = '{"format":"gpu-memory-trace/1","gpus":[{"index":0,"name":"g","uuid":"u","total":100}]}'
    p = tmp_path / "deep.jsonl"
    p.write_text(head + "\n" + "[" * 100_000 + "\n")
    with caplog.at_level(logging.WARNING):
        _, it = read_trace(str(p))
        assert list(it) == []  # a last line that is no trace line: the cut-line warning, no traceback
    p.write_text("[" * 100_000 + "\n")
    try:
        read_trace(str(p))
    except OomwatchError as e:
        assert "nests deeper" in str(e)
