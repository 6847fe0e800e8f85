"""Start real servers for integration tests: Alertmanager, Prometheus, a webhook receiver, oomwatch.

Everything binds to 127.0.0.1 on free ports and is stopped by the fixture that started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import daemon_run_argv, free_port, need_binary, stop_process


def wait_http(url, deadline=20.0, ok=lambda body: True, context=None, headers=None):
    """The body of `url` once it answers (and `ok` likes it); `context`: an ssl.SSLContext for https,
    `headers`: sent with each try (an Authorization)."""
    t0 = time.time()
    last = None
    while time.time() - t0 < deadline:
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers or {}), timeout=2, context=context
            ) as r:
                body = r.read().decode()
                if ok(body):
                    return body
        except urllib.error.HTTPError as e:  # up but not ready (Prometheus answers 503): the error holds the
            e.close()  # connection; closed here, not at some later test's garbage collection
            last = e
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready: {last}")


def _start_ready(argv: list[str], ready_url: str, **wait) -> subprocess.Popen:
    """Start a server binary (its output discarded) and return once `ready_url` answers (`wait`: wait_http's
    context and headers); one that never does is stopped and the test fails."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(ready_url, **wait)
    except AssertionError:
        stop_process(p, kill=True)
        raise
    return p


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output clean and tolerates clients that hang up."""

    def log_message(self, *a):
        pass

    def reply(self, code: int, content_type: str, body: bytes, length: bool = True) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up: fine
            self.wfile.write(body)


class LocalHttp:
    """A threaded HTTP server on a free loopback port; close() stops it and closes its listening socket."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Webhook(LocalHttp):
    """An Alertmanager webhook receiver that records each notification with its arrival time."""

    def __init__(self):
        self.events: list[tuple[float, dict]] = []
        outer = self

        class H(QuietHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                outer.events.append((time.time(), json.loads(self.rfile.read(n))))
                self.send_response(200)
                self.end_headers()

        super().__init__(H)
        self.url = self.base + "/hook"

    def alerts(self, name, status=None):
        out = []
        for t, ev in self.events:
            for a in ev.get("alerts", []):
                if a["labels"].get("alertname") == name and (status is None or a["status"] == status):
                    out.append((t, a))
        return out


class Alertmanager:
    """`web_config`: a --web.config.file (TLS, basic auth), with `ready` the wait_http arguments (context,
    headers) that get through it; the URL is then https when `ready` has a context."""

    def __init__(self, tmp, webhook_url, port=None, web_config=None, ready=None):
        self.bin = need_binary("prometheus-alertmanager")
        self.web_config, self.ready = web_config, ready or {}
        self.port = port or free_port()
        self.tmp = tmp
        self.cfg = os.path.join(tmp, "am.yml")
        with open(self.cfg, "w") as f:
            f.write(
                "route:\n  receiver: hook\n  group_by: ['alertname', 'gpu', 'pid']\n  group_wait: 0s\n"
                "  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n"
                f"    webhook_configs:\n      - url: {webhook_url}\n        send_resolved: true\n"
            )
        self.proc = None
        self.url = f"{'https' if self.ready.get('context') else 'http'}://127.0.0.1:{self.port}"

    def start(self):
        data = os.path.join(self.tmp, f"am-data-{time.time_ns()}")
        os.makedirs(data)
        self.proc = _start_ready(
            [
                self.bin,
                f"--config.file={self.cfg}",
                f"--storage.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                *([f"--web.config.file={self.web_config}"] if self.web_config else []),
            ],
            self.url + "/-/ready",
            **self.ready,
        )
        return self

    def stop(self):
        if self.proc:
            stop_process(self.proc)


class Prometheus:
    def __init__(self, tmp, target, rules, scrape_interval="1s", alertmanager=None, scrape_extra="", jobs=None):
        """`target`: the oomwatch job's target (or a list of them, one per node); `scrape_extra`: more of the
        oomwatch job's scrape config (scheme, tls_config, basic_auth), as YAML lines indented under the job;
        `jobs`: other jobs scraped beside it, {job name: [targets]} (a dcgm-exporter per node)."""
        targets = [target] if isinstance(target, str) else list(target)
        self.bin = need_binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = os.path.join(tmp, "prom.yml")
        with open(cfg, "w") as f:
            f.write(
                f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
                f"rule_files:\n"
                + "".join(f"  - {r}\n" for r in rules)
                + f"scrape_configs:\n  - job_name: oomwatch\n{scrape_extra}"
                + f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
                + "".join(
                    f"  - job_name: {name}\n    static_configs:\n      - targets: {json.dumps(list(ts))}\n"
                    for name, ts in (jobs or {}).items()
                )
            )
            if alertmanager:
                f.write(f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\n")
        self.proc = _start_ready(
            [
                self.bin,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--rules.alert.resend-delay=1s",
            ],
            self.url + "/-/ready",
        )

    def query(self, q):
        from urllib.parse import quote

        with urllib.request.urlopen(f"{self.url}/api/v1/query?query={quote(q)}", timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def alerts(self):
        with urllib.request.urlopen(self.url + "/api/v1/alerts", timeout=5) as r:
            return json.loads(r.read())["data"]["alerts"]

    def stop(self):
        stop_process(self.proc)


def start_oomwatch(*args, env=None, ca=None):
    """`oomwatch run ARGS` on a free port, once it answers: (process, "127.0.0.1:port"); stop it with
    conftest.stop_process. A daemon that never answers is stopped here and the test fails. `ca`: the CA
    file of a daemon that serves TLS (--web-config-file), to wait for it over https."""
    port = free_port()
    p = subprocess.Popen(
        daemon_run_argv(port, *args),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if ca is None:
            wait_http(f"http://127.0.0.1:{port}/healthz")
        else:
            import ssl

            wait_http(f"https://127.0.0.1:{port}/healthz", context=ssl.create_default_context(cafile=ca))
    except AssertionError:
        stop_process(p, kill=True)
        raise
    return p, f"127.0.0.1:{port}"


class StaticServer(LocalHttp):
    """Serves one fixed body on every GET (an engine endpoint from a real capture, or a huge body)."""

    def __init__(self, body: bytes, content_type: str = "text/plain; version=0.0.4"):
        class H(QuietHandler):
            def do_GET(self):
                self.reply(200, content_type, body, length=False)  # no length: the body streams until close

        super().__init__(H)
        self.url = self.base
