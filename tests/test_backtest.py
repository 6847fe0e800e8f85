"""`oomwatch backtest` without a real Prometheus: the flags, the series grouping, sharding, suspected-OOM
detection, and every way a Prometheus can fail (each one clear line, exit 2; one card's failure on its
line only), against small fake HTTP servers. The real-Prometheus tests are in test_backtest_prometheus.py."""

import json
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from oomwatch.backtest.ooms import NEAR_FULL_RATIO, OomDetector, match_pages
from oomwatch.backtest.options import parse_duration, parse_time, time_range
from oomwatch.backtest.series import cards_from_series, in_shard, parse_shard, shard_of
from oomwatch.cli import main
from oomwatch.errors import UsageError
from oomwatch.model import GpuSample, Sample
from oomwatch.sources.prometheus import CHUNK_POINTS, MAX_POINTS_PER_SERIES, PrometheusError, chunks, redact_url
from servers import LocalHttp, QuietHandler

GIB = 1 << 30
DCGM_SERIES = [
    {"__name__": f"DCGM_FI_DEV_FB_{r}", "gpu": str(g), "UUID": f"GPU-{n}-{g}", "Hostname": n, "modelName": "H200"}
    for n in ("node-a", "node-b")
    for g in (0, 1)
    for r in ("USED", "FREE", "RESERVED")
]


def one_line_exit_2(code, err, *needles):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]


# ---- flags --------------------------------------------------------------------------------------------
def test_durations_and_times():
    assert parse_duration("30d", "--since") == 30 * 86400
    assert parse_duration("1h30m", "--since") == 5400
    assert parse_duration("250ms", "--step") == 0.25
    assert parse_duration("15", "--step") == 15
    assert parse_time("2026-11-01T00:00:00Z", "--start") == parse_time("1793491200", "--start")
    assert time_range("1d", None, "1000000", now=0) == (1000000 - 86400, 1000000)
    for bad in ("", "30x", "d", "-5s", "1d2", "nan"):
        with pytest.raises(UsageError, match="--since"):
            parse_duration(bad, "--since")
    with pytest.raises(UsageError, match="not both"):
        time_range("1d", "0", None)
    with pytest.raises(UsageError, match="before"):
        time_range(None, "100", "50")


def test_chunks_stay_under_the_points_limit_and_cover_the_range_once():
    step = 30.0
    got = list(chunks(0.0, 30 * 86400.0, step))
    assert got[0][0] == 0.0 and got[-1][1] == 30 * 86400.0
    for s, e in got:
        assert (e - s) / step + 1 <= CHUNK_POINTS < MAX_POINTS_PER_SERIES
    for (_, e), (s2, _) in zip(got, got[1:], strict=False):
        assert s2 == e + step  # no step read twice, none skipped
    assert sum(round((e - s) / step) + 1 for s, e in got) == 30 * 86400 // 30 + 1


def test_redact_url_drops_userinfo_and_query():
    shown = redact_url("https://alice:s3cret@prom.example:9090/prometheus?token=abc")
    assert "s3cret" not in shown and "alice" not in shown and "abc" not in shown
    assert shown.startswith("https://prom.example:9090/prometheus")


# ---- cards and shards --------------------------------------------------------------------------------
def test_series_are_grouped_into_cards_whatever_their_pod_labels():
    pods = [dict(s, pod=f"vllm-{k}", namespace="ml") for k, s in enumerate(DCGM_SERIES)]
    other = [
        {"__name__": "nvidia_smi_memory_used_bytes", "uuid": "GPU-x", "instance": "h:9835", "name": "A10"},
        {"__name__": "nvidia_smi_memory_total_bytes", "uuid": "GPU-x", "instance": "h:9835", "name": "A10"},
        {"__name__": "up", "instance": "h:9835"},
    ]
    cards = cards_from_series(pods + other)
    assert len(cards) == 5
    dcgm = [c for c in cards if c.source.name == "dcgm-exporter"]
    assert [(c.node, c.gpu) for c in dcgm] == [("node-a", "0"), ("node-a", "1"), ("node-b", "0"), ("node-b", "1")]
    assert dcgm[0].roles == {"used", "free", "reserved"} and dcgm[0].pod is not None
    assert "pod" not in dcgm[0].query("used")  # one curve per card however many pods used it
    nv = next(c for c in cards if c.source.name == "nvidia_gpu_exporter")
    assert nv.roles == {"used", "total"} and nv.model == "A10" and nv.node == "h:9835"


def test_shards_split_the_fleet_by_node_stably():
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "1", "a/b", "0/0", "-1/3"):
        with pytest.raises(ValueError, match="K/N"):
            parse_shard(bad)
    series = [dict(s, Hostname=f"node-{k}") for k in range(40) for s in DCGM_SERIES[:3]]
    cards = cards_from_series(series)
    parts = [[c for c in cards if in_shard(c, (k, 3))] for k in range(3)]
    assert sorted(id(c) for p in parts for c in p) == sorted(id(c) for c in cards)  # each card in one shard
    assert all(len(p) >= 5 for p in parts)  # and none of them empty at 40 nodes
    assert shard_of("node-7", 3) == 2  # crc32 (0xfa91b96a % 3): the same in every process and host


# ---- suspected OOMs ----------------------------------------------------------------------------------
def _curve(det, points, total=100 * GIB, reserved=GIB):
    for t, used in points:
        det.add(Sample(t, (GpuSample(0, int(used), total - reserved - int(used), reserved),)))


def test_a_card_that_empties_from_near_full_within_a_step_is_a_suspected_oom():
    det = OomDetector(0, 100 * GIB, 30.0)
    usable = 99 * GIB
    _curve(det, [(0, 0.5 * usable), (30, 0.9 * usable), (60, 0.97 * usable), (90, 0.3 * GIB), (120, 0)])
    assert [(o.t, o.dropped_at) for o in det.found] == [(60, 90)]
    assert det.found[0].peak_used_ratio >= NEAR_FULL_RATIO
    match_pages(det.found, [(0.0, 20.0), (45.0, None)])
    assert det.found[0].paged_ahead_s == 15.0


def test_slow_or_partial_falls_are_not_ooms():
    det = OomDetector(0, 100 * GIB, 30.0)
    usable = 99 * GIB
    _curve(det, [(0, 0.97 * usable), (30, 0.6 * usable), (60, 0.3 * usable), (90, 0)])  # a drain over minutes
    _curve(det, [(120, 0.97 * usable), (150, 0.5 * usable), (180, 0.97 * usable)])  # gave half back
    _curve(det, [(200, 0.9 * usable), (230, 0)])  # not near full: a stop, not an OOM
    assert det.found == []
    match_pages(det.found, [])


# ---- failures: one line, exit 2 ----------------------------------------------------------------------
class FakeProm(LocalHttp):
    """Answers /api/v1/series with `series` and /api/v1/query_range with `range_reply(params)`."""

    def __init__(self, series=(), range_reply=None, delay_s=0.0):
        fake = self

        class H(QuietHandler):
            def do_GET(self):
                time.sleep(delay_s)
                u = urlsplit(self.path)
                q = parse_qs(u.query)
                if u.path == "/api/v1/series":
                    code, body = 200, {"status": "success", "data": list(series)}
                elif u.path == "/api/v1/query_range" and range_reply is not None:
                    code, body = range_reply(q)
                else:
                    code, body = 404, {"status": "error", "errorType": "not_found", "error": "no such path"}
                fake.seen.append((u.path, q))
                self.reply(code, "application/json", json.dumps(body).encode())

        self.seen = []
        super().__init__(H)


@pytest.fixture
def fake():
    made = []

    def make(**kw):
        f = FakeProm(**kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def backtest(capsys, url, *args):
    code = main(["backtest", "--prometheus", url, "--start", "1790000000", "--end", "1790003600", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_prometheus_down_is_one_line(capsys):
    from conftest import free_port

    code, _, err = backtest(capsys, f"http://127.0.0.1:{free_port()}")
    one_line_exit_2(code, err, "cannot reach Prometheus", "connection refused")


def test_bad_urls_are_one_line(capsys):
    for url in ("ftp://prom:9090", "prometheus:9090", "http://"):
        code, _, err = backtest(capsys, url)
        one_line_exit_2(code, err, "--prometheus")


def test_too_many_points_is_one_line(capsys, fake):
    msg = "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution"
    f = fake(
        series=DCGM_SERIES, range_reply=lambda q: (422, {"status": "error", "errorType": "bad_data", "error": msg})
    )
    code, out, err = backtest(capsys, f.base, "--step", "1")
    one_line_exit_2(code, err, "too many points", "--step")
    assert out == ""  # nothing half-reported


def test_a_timeout_is_one_line(capsys, fake):
    f = fake(series=DCGM_SERIES, delay_s=2.0)
    t0 = time.monotonic()
    code, _, err = backtest(capsys, f.base, "--timeout", "0.3")
    one_line_exit_2(code, err, "did not answer within 0.3 s")
    assert time.monotonic() - t0 < 2.0


def test_not_a_prometheus_is_one_line(capsys):
    from servers import StaticServer

    s = StaticServer(b"<html>grafana</html>", "text/html")
    try:
        code, _, err = backtest(capsys, s.base)
    finally:
        s.close()
    one_line_exit_2(code, err, "is this a Prometheus URL?")


def test_credentials_never_reach_the_output(capsys):
    from conftest import free_port

    code, out, err = backtest(capsys, f"http://alice:s3cret@127.0.0.1:{free_port()}")
    one_line_exit_2(code, err)
    assert "s3cret" not in out + err and "alice" not in out + err


def test_a_card_that_fails_is_reported_on_its_line_and_the_others_go_on(capsys, fake):
    start = 1790000000.0
    lock = threading.Lock()

    def reply(q):
        with lock:
            if 'UUID="GPU-node-a-1"' in q["query"][0]:  # one card's queries fail inside Prometheus
                return 503, {"status": "error", "errorType": "execution", "error": "query timed out in expression"}
        name = q["query"][0].split("(")[-1].split("{")[0]
        used = 40 * 1024 if name.endswith("USED") else 100 * 1024 if name.endswith("FREE") else 600
        values = [[start + 30 * k, str(used)] for k in range(100)]
        return 200, {
            "status": "success",
            "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]},
        }

    f = fake(series=DCGM_SERIES, range_reply=reply)
    code, out, err = backtest(capsys, f.base, "--json")
    assert code == 1 and err == "", err
    lines = [json.loads(x) for x in out.splitlines()]
    cards, totals = lines[:-1], lines[-1]["totals"]
    assert len(cards) == 4 and totals["cards"] == 4 and totals["cards_failed"] == 1
    bad = [c for c in cards if c["error"]]
    assert [c["card"]["uuid"] for c in bad] == ["GPU-node-a-1"] and "execution" in bad[0]["error"]
    good = [c for c in cards if not c["error"]]
    assert all(c["samples"] == 100 and c["suspected_ooms"] == [] and c["alerts"] == [] for c in good)
    assert totals["samples"] == 300 and totals["pages"] == 0


def test_no_series_says_so(capsys, fake):
    f = fake(series=[])
    code, out, err = backtest(capsys, f.base)
    assert code == 0 and "no GPU memory series" in out and err == ""


def _matrix(values):
    return 200, {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}


def test_a_series_with_a_gap_that_ends_early_is_analysed_as_it_is(capsys, fake):
    start = 1790000000.0
    steps = [k for k in range(120) if not 40 <= k < 70 and k < 100]  # a 15-minute gap; it ends 10 min early

    def reply(q):
        name = q["query"][0].split("(")[-1].split("{")[0]
        v = 40 * 1024 if name.endswith("USED") else 100 * 1024 if name.endswith("FREE") else 600
        return _matrix([[start + 30 * k, str(v)] for k in steps])

    f = fake(series=DCGM_SERIES[:3], range_reply=reply)
    code, out, err = backtest(capsys, f.base, "--json", "--step", "30")
    assert code == 0, err
    card = json.loads(out.splitlines()[0])
    assert card["error"] is None and card["samples"] == len(steps)
    assert card["start"] == start and card["end"] == start + 30 * 99


def test_a_shard_queries_only_its_own_cards(capsys, fake):
    series = [dict(s, Hostname=f"node-{k}", UUID=f"GPU-{k}") for k in range(12) for s in DCGM_SERIES[:3]]

    def reply(q):
        return _matrix([[1790000000.0 + 30 * k, "1000"] for k in range(10)])

    f = fake(series=series, range_reply=reply)
    code, out, err = backtest(capsys, f.base, "--json", "--shard", "1/3")
    assert code == 0, err
    mine = {f"GPU-{k}" for k in range(12) if shard_of(f"node-{k}", 3) == 1}
    assert {json.loads(x)["card"]["uuid"] for x in out.splitlines()[:-1]} == mine
    asked = {q["query"][0].split('UUID="')[1].split('"')[0] for p, q in f.seen if p == "/api/v1/query_range"}
    assert asked == mine  # the other shards' cards were never read
    assert [p for p, _ in f.seen].count("/api/v1/series") == 1


def test_a_fatal_error_stops_the_cards_in_flight(capsys, fake):
    msg = "exceeded maximum resolution of 11,000 points per timeseries"

    def reply(q):
        if 'UUID="GPU-node-a-0"' in q["query"][0]:
            return 422, {"status": "error", "errorType": "bad_data", "error": msg}
        time.sleep(0.3)  # the other cards: slow reads, 3 chunks x 3 metrics each over 10 days
        return _matrix([[1790000000.0, "1000"]])

    f = fake(series=DCGM_SERIES, range_reply=reply)
    t0 = time.monotonic()
    code = main(["backtest", "--prometheus", f.base, "--start", "1790000000", "--end", "1790864000", "--json"])
    _, err = capsys.readouterr()
    one_line_exit_2(code, err, "too many points")
    assert time.monotonic() - t0 < 2.0  # not 3 cards x 9 reads x 0.3 s


def test_a_fatal_error_stays_fatal_across_a_process_boundary():
    """A worker process hands its PrometheusError back pickled: `fatal` must survive, or a refused query
    would be reported on one card's line while every other card meets it too."""
    import pickle

    e = pickle.loads(pickle.dumps(PrometheusError("too many points", fatal=True)))
    assert isinstance(e, PrometheusError) and e.fatal is True and str(e) == "too many points"
    assert pickle.loads(pickle.dumps(PrometheusError("one card"))).fatal is False


def test_a_worker_that_dies_ends_the_run_with_one_line_not_a_hang(capsys, fake):
    """A worker process killed mid-card (the kernel's OOM killer, a signal) loses that card's result: the run
    ends at once with one line, the cards already written kept, instead of waiting for it forever."""
    import psutil

    def reply(q):
        time.sleep(0.3)  # every read slow: the workers are busy when one is killed
        return _matrix([[1790000000.0, "1000"]])

    f = fake(series=DCGM_SERIES, range_reply=reply)
    me = psutil.Process()

    def kill_a_worker():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the workers are the fork server's children, not ours
            workers = [p for p in me.children(recursive=True) if p.ppid() != me.pid]
            if workers:
                time.sleep(0.5)
                workers[0].kill()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    t0 = time.monotonic()
    code = main(
        ["backtest", "--prometheus", f.base, "--start", "1790000000", "--end", "1790864000", "--workers", "2", "--json"]
    )
    killer.join()
    _, err = capsys.readouterr()
    one_line_exit_2(code, err, "worker process died")
    assert time.monotonic() - t0 < 10.0  # not a hang
