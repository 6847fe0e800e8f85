"""The /metrics server under a cluster's load: concurrent scrapers, content negotiation, slow and rude peers.

Real sockets on 127.0.0.1, a hand-built snapshot (tests/snapshots.py), the server in this process so its
threads can be counted.
"""

import gzip
import http.client
import logging
import socket
import threading
import time

import pytest

from oomwatch.exporters import server as srv
from oomwatch.exporters.metrics import serve
from snapshots import cluster_snapshot

CONCURRENT = 500  # a Prometheus HA pair, federation and a team's browsers at once, with room to spare


@pytest.fixture(scope="module")
def snapshot():
    return cluster_snapshot()


@pytest.fixture
def server(snapshot):
    httpd, th = serve("127.0.0.1:0", lambda: snapshot, {"/page": lambda: ("text/html", b"<p>hi</p>")})
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    th.join(5)


def _request(httpd, method="GET", path="/metrics", headers=None, timeout=30.0):
    c = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1], timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def _http_threads():
    return [t for t in threading.enumerate() if t.name.startswith("oomwatch-http_")]


def test_500_concurrent_scrapes_are_all_answered_by_a_bounded_pool(server):
    results, errors = [], []
    go = threading.Barrier(CONCURRENT)

    def one():
        go.wait()
        try:
            results.append(_request(server)[0])
        except Exception as e:  # noqa: BLE001 - counted below
            errors.append(repr(e))

    clients = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    assert not errors, errors[:3]
    assert results == [200] * CONCURRENT
    assert 1 <= len(_http_threads()) <= srv.WORKERS


def test_text_format_by_default_and_openmetrics_when_asked(server):
    code, h, body = _request(server)
    assert code == 200 and h["Content-Type"].startswith("text/plain") and b"oomwatch_gpu_memory_used_bytes" in body
    code, h, body = _request(server, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert h["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n") and b"oomwatch_gpu_memory_used_bytes" in body


def test_gzip_when_accepted_and_head_without_a_body(server):
    _, plain_h, plain = _request(server, path="/page")
    code, h, body = _request(server, headers={"Accept-Encoding": "gzip"})
    assert (
        code == 200 and h["Content-Encoding"] == "gzip" and b"oomwatch_gpu_memory_used_bytes" in gzip.decompress(body)
    )
    assert "Content-Encoding" not in plain_h and plain == b"<p>hi</p>"
    code, h, body = _request(server, method="HEAD")
    assert code == 200 and body == b"" and int(h["Content-Length"]) > 1000
    assert _request(server, method="HEAD", path="/nope")[0] == 404


def test_name_filter_as_prometheus_client_serves_it(server):
    _, _, body = _request(server, path="/metrics?name[]=oomwatch_gpu_memory_total_bytes")
    names = {ln.split("{")[0].split(" ")[0] for ln in body.decode().splitlines() if not ln.startswith("#")}
    assert names == {"oomwatch_gpu_memory_total_bytes"}


def test_a_slowloris_holds_no_more_threads_than_the_pool(snapshot, monkeypatch):
    """Many connections that never send a request: threads stop at the pool's size, they time out, and a
    real scrape is answered afterwards."""
    monkeypatch.setattr(srv.Handler, "timeout", 0.5)
    httpd, th = serve("127.0.0.1:0", lambda: snapshot)
    socks = []
    try:
        for _ in range(srv.WORKERS + 40):
            s = socket.create_connection(httpd.server_address, timeout=5)
            s.send(b"GET /met")  # and then nothing
            socks.append(s)
        time.sleep(0.3)
        assert len(_http_threads()) <= srv.WORKERS
        code, _, _ = _request(httpd, timeout=30)
        assert code == 200
    finally:
        for s in socks:
            s.close()
        httpd.shutdown()
        httpd.server_close()
        th.join(5)
    assert len(_http_threads()) <= srv.WORKERS


def test_a_client_that_hangs_up_is_no_traceback(server, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger="oomwatch.http")
    for _ in range(20):
        s = socket.create_connection(server.server_address, timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        s.send(b"GET /metrics HTTP/1.0\r\n\r\n")
        s.close()
    assert _request(server)[0] == 200
    time.sleep(0.2)
    assert "Traceback" not in capsys.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_server_close_frees_workers_stuck_on_a_silent_client(snapshot):
    httpd, th = serve("127.0.0.1:0", lambda: snapshot)
    s = socket.create_connection(httpd.server_address, timeout=5)
    s.send(b"GET /")
    time.sleep(0.2)
    t0 = time.monotonic()
    httpd.shutdown()
    httpd.server_close()
    th.join(5)
    try:
        assert s.recv(10) == b""  # the server hung up at once rather than after IO_TIMEOUT_S
    finally:
        s.close()
    assert time.monotonic() - t0 < srv.IO_TIMEOUT_S / 2


def test_shutdown_is_prompt_while_every_worker_is_held(snapshot):
    """A full slowloris holds all workers and the accept loop waits for one: shutdown (SIGTERM) still returns
    at once rather than after IO_TIMEOUT_S."""
    httpd, th = serve("127.0.0.1:0", lambda: snapshot)
    socks = []
    try:
        for _ in range(srv.WORKERS + 5):
            s = socket.create_connection(httpd.server_address, timeout=5)
            s.send(b"GET /")
            socks.append(s)
        time.sleep(0.5)
        t0 = time.monotonic()
        httpd.shutdown()
        httpd.server_close()
        th.join(5)
        assert time.monotonic() - t0 < srv.IO_TIMEOUT_S / 2 and not th.is_alive()
    finally:
        for s in socks:
            s.close()


def test_a_connection_still_queued_for_a_worker_is_closed_when_the_server_closes():
    """A connection handed to the pool while its worker was still finishing the last one waits in the pool's
    queue; closing the server cancels it. No worker will ever run it, so the server closes its socket (else
    it stays open until the garbage collector finds it, long after shutdown)."""
    from concurrent.futures import ThreadPoolExecutor

    httpd = srv.PooledHTTPServer(("127.0.0.1", 0), srv.Handler, workers=1)
    busy, release = threading.Event(), threading.Event()
    httpd._pool.shutdown()
    httpd._pool = ThreadPoolExecutor(max_workers=1)  # its one thread held, as by a worker still finishing
    httpd._pool.submit(lambda: (busy.set(), release.wait(5)))
    assert busy.wait(5)
    ours, theirs = socket.socketpair()
    try:
        httpd.process_request(ours, ("127.0.0.1", 1))  # a free slot: handed to the pool, queued there
        httpd.server_close()
        release.set()
        assert ours.fileno() == -1  # closed, not left to the garbage collector
    finally:
        release.set()
        ours.close()
        theirs.close()
