"""The HTTP server behind /metrics and the status page: bounded, quiet, and prometheus_client's own encoding.

Why not `ThreadingHTTPServer` as it comes: it starts one thread per connection with no limit, so a
slowloris (or a dashboard left open by every person of a team) grows threads without bound, and a
scraper that hangs up mid-answer prints a traceback on stderr. Here:

- connections are accepted only while one of `WORKERS` pooled threads is free; the rest wait in the
  kernel's listen queue (`BACKLOG`), so threads stay bounded and nothing queues unbounded in Python;
- every socket read and write times out after `IO_TIMEOUT_S`, so a silent client frees its worker;
- HTTP/1.0, one request per connection: an idle keep-alive connection never holds a worker between scrapes;
- a peer that goes away (broken pipe, reset, timeout) is a debug line, not a traceback;
- /metrics is encoded as prometheus_client encodes it: the exposition format chosen from `Accept`
  (OpenMetrics when asked), `name[]` filters, gzip when `Accept-Encoding` allows it (any page is gzipped
  then), and HEAD answers the headers alone.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

__all__ = ["BACKLOG", "IO_TIMEOUT_S", "WORKERS", "Handler", "PooledHTTPServer", "Route"]

log = logging.getLogger("oomwatch.http")

#: Worker threads at most: a Prometheus HA pair and a few federations scrape every 15 s, and a team's
#: status pages poll every 2 s; each answer takes milliseconds, so 64 leave room for slow clients.
WORKERS = 64
#: Connections the kernel keeps waiting for a free worker (socket listen backlog).
BACKLOG = 512
#: Seconds a read or write on one connection may stall before the connection is dropped.
IO_TIMEOUT_S = 10.0
#: How often a blocked accept loop looks whether the server is shutting down.
_SLOT_POLL_S = 0.5
#: What a client that hangs up or stalls raises; it is the client's doing, not a server error.
_PEER_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

Route = Callable[[], tuple[str, bytes]]  # a page: () -> (content type, body)


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD of fixed routes; `/metrics` from `registry` with content negotiation."""

    server_version = "oomwatch"
    protocol_version = "HTTP/1.0"  # one request per connection (see the module docstring)
    timeout = IO_TIMEOUT_S  # StreamRequestHandler sets it on the socket: reads and writes alike
    routes: dict[str, Route] = {}
    registry: CollectorRegistry | None = None

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        url = urlsplit(self.path)
        try:
            if url.path == "/metrics" and self.registry is not None:
                ctype, data = self._metrics(parse_qs(url.query))
            elif url.path in self.routes:
                ctype, data = self.routes[url.path]()
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found; try /metrics\n", body)
                return
        except Exception:  # noqa: BLE001 - a failing page must not kill the server
            log.exception("error serving %s", url.path)
            self._send(500, "text/plain; charset=utf-8", b"internal error\n", body)
            return
        self._send(200, ctype, data, body, may_gzip=True)

    def _metrics(self, params: dict[str, list[str]]) -> tuple[str, bytes]:
        assert self.registry is not None
        encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
        reg: Any = self.registry
        if "name[]" in params:
            reg = reg.restricted_registry(params["name[]"])
        return ctype, encoder(reg)

    def _send(self, code: int, ctype: str, data: bytes, body: bool, may_gzip: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if may_gzip:
            self.send_header("Vary", "Accept-Encoding")
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                data = gzip.compress(data)
                self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, fmt: str, *args: object) -> None:  # quiet; scrapes every 15 s would flood the log
        log.debug("%s " + fmt, self.address_string(), *args)


class PooledHTTPServer(HTTPServer):
    """An HTTPServer whose requests run on a bounded pool; accepting waits for a free worker."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[Handler], workers: int = WORKERS) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oomwatch-http")
        self._slots = threading.BoundedSemaphore(workers)
        self._closing = threading.Event()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)  # binds; on failure it calls server_close, which needs the above

    def process_request(self, request: Any, client_address: Any) -> None:
        while not self._slots.acquire(timeout=_SLOT_POLL_S):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        with self._open_lock:
            self._open.add(request)
        try:
            self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is closing
            self._done(request)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - handle_error tells a peer gone from a bug
            self.handle_error(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        self.shutdown_request(request)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is a debug line; anything else is logged once with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, _PEER_GONE):
            log.debug("client %s went away: %s", client_address, type(exc).__name__)
        else:
            log.error("error answering %s", client_address, exc_info=exc)

    def shutdown(self) -> None:
        """Stop `serve_forever` without waiting for a free worker or a slow client (a SIGTERM during a
        slowloris still stops the daemon at once)."""
        self._closing.set()
        self._hang_up()
        super().shutdown()

    def server_close(self) -> None:
        """Stop accepting, wake workers stuck on a slow client, and let the pool go without waiting."""
        self._closing.set()
        super().server_close()
        self._hang_up()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _hang_up(self) -> None:
        with self._open_lock:
            stuck = list(self._open)
        for sock in stuck:
            with contextlib.suppress(OSError):  # already closed by its worker
                sock.shutdown(socket.SHUT_RDWR)
