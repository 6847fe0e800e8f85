"""The HTTP server behind /metrics and the status page: bounded, quiet, and prometheus_client's own encoding.

Why not `ThreadingHTTPServer` as it comes: it starts one thread per connection with no limit, so a
slowloris (or a dashboard left open by every person of a team) grows threads without bound, and a
scraper that hangs up mid-answer prints a traceback on stderr. Here:

- connections are accepted only while one of `WORKERS` pooled threads is free; the rest wait in the
  kernel's listen queue (`BACKLOG`), so threads stay bounded and nothing queues unbounded in Python;
- every socket read and write times out after `IO_TIMEOUT_S`, so a silent client frees its worker;
- HTTP/1.0, one request per connection: an idle keep-alive connection never holds a worker between scrapes;
- a peer that goes away (broken pipe, reset, timeout) is a debug line, not a traceback;
- with a web config (exporters/webconfig.py), TLS is negotiated on the worker, under the same timeout (a
  client that never finishes its handshake holds one worker for `IO_TIMEOUT_S`, never the accept loop),
  basic auth is checked before any route but /healthz, and the configured headers go on every answer;
- /metrics is encoded as prometheus_client encodes it: the exposition format chosen from `Accept`
  (OpenMetrics when asked), `name[]` filters, gzip when `Accept-Encoding` allows it (any page is gzipped
  then), and HEAD answers the headers alone.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from .webconfig import OPEN_PATHS, WebConfig, WebConfigHolder

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
_PEER_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError, ssl.SSLError)

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

    def _web(self) -> WebConfig | None:
        holder = getattr(self.server, "web", None)
        return holder.current() if isinstance(holder, WebConfigHolder) else None

    def _answer(self, body: bool) -> None:
        url = urlsplit(self.path)
        web = self._web()
        if web is not None and url.path not in OPEN_PATHS and not web.authorized(self.headers.get("Authorization")):
            log.debug("%s: basic auth refused for %s", self.address_string(), url.path)
            self._send(401, "text/plain; charset=utf-8", b"unauthorized\n", body, auth=True)
            return
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

    def _send(self, code: int, ctype: str, data: bytes, body: bool, may_gzip: bool = False, auth: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if auth:
            self.send_header("WWW-Authenticate", 'Basic realm="oomwatch", charset="UTF-8"')
        web = self._web()
        for name, value in web.headers if web is not None else ():
            self.send_header(name, value)
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

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[Handler],
        workers: int = WORKERS,
        web: WebConfigHolder | None = None,
    ) -> None:
        self.web = web
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
            job = self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is closing
            self._done(request)
            return
        # A worker hands its slot back before its thread is free again, so a connection can wait in the pool's
        # queue for a moment; one still there when the server closes is cancelled, and no worker will close it.
        job.add_done_callback(lambda j: self._done(request) if j.cancelled() else None)

    def _work(self, request: Any, client_address: Any) -> None:
        conn = request
        try:
            ctx = self.web.current().ssl_context if self.web is not None else None
            if ctx is not None:
                conn = self._tls(ctx, request)
                conn.do_handshake()  # ssl.SSLError (a plain HTTP client, a refused certificate): a debug line
            self.finish_request(conn, client_address)
        except Exception:  # noqa: BLE001 - handle_error tells a peer gone from a bug
            self.handle_error(conn, client_address)
        finally:
            self._done(request, conn)

    def _tls(self, ctx: ssl.SSLContext, request: socket.socket) -> ssl.SSLSocket:
        """The TLS socket (its handshake bounded by IO_TIMEOUT_S), which replaces the plain one (it detaches
        it) among the open connections that a shutdown hangs up."""
        request.settimeout(IO_TIMEOUT_S)
        with self._open_lock:
            conn = ctx.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            self._open.discard(request)
            self._open.add(conn)
        return conn

    def _done(self, request: Any, conn: Any = None) -> None:
        with self._open_lock:
            self._open.discard(request)
            self._open.discard(conn)
        self.shutdown_request(conn if conn is not None else request)
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
