"""Credentials kept secret, end to end with real binaries and real TLS (certificates made here, tests/certs.py):

- a real Prometheus scrapes oomwatch over TLS with basic auth (its `tls_config.ca_file`, `basic_auth.password_file`)
  and answers a query for an oomwatch series;
- a real Alertmanager behind its own web config (TLS and basic auth, the same exporter-toolkit format) gets
  oomwatch's pushed alert with the password from a file; the file is read at every push, so a wrong password
  written into it turns the next pushes into 401s: oomwatch reports the sink down (`oomwatch_sink_up 0`) and
  the password shows in no label, no page and no log line;
- a bearer token from a file reaches an Alertmanager behind a token-checking proxy (how an Alertmanager is put
  behind bearer auth: it has none of its own).
"""

import base64
import os
import re
import ssl
import time
import urllib.request

import pytest

from certs import bcrypt_hash, make_pki, secret_file
from conftest import ROOT, example, stop_process
from servers import Alertmanager, LocalHttp, Prometheus, QuietHandler, Webhook, start_oomwatch, wait_http

pytestmark = pytest.mark.integration

SCRAPE_PASSWORD = "scrape-Pa55-9f2c"
AM_PASSWORD = "am-Pa55-71be"
WRONG_PASSWORD = "wrong-Pa55-0d3a"
TOKEN = "tok-4a6f0c1e9b7d"


@pytest.fixture
def hook():
    w = Webhook()
    yield w
    w.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def _basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _https_get(url, ca, user, password):
    req = urllib.request.Request(url, headers={"Authorization": _basic(user, password)})
    with urllib.request.urlopen(req, timeout=5, context=ssl.create_default_context(cafile=ca)) as r:
        return r.read().decode()


def _web_config(tmp_path, pki, user, password, name):
    p = tmp_path / name
    p.write_text(
        f"tls_server_config:\n  cert_file: {pki.cert}\n  key_file: {pki.key}\n"
        f"basic_auth_users:\n  {user}: {bcrypt_hash(password)}\n"
    )
    return str(p)


def _secure_alertmanager(tmp_path, pki, hook):
    web = _web_config(tmp_path, pki, "oomwatch", AM_PASSWORD, "am-web.yml")
    ready = {
        "context": ssl.create_default_context(cafile=pki.ca),
        "headers": {"Authorization": _basic("oomwatch", AM_PASSWORD)},
    }
    return Alertmanager(str(tmp_path), hook.url, web_config=web, ready=ready).start()


def _wait(cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    return cond()


def test_prometheus_scrapes_oomwatch_over_tls_with_basic_auth(tmp_path, pki):
    web = _web_config(tmp_path, pki, "prometheus", SCRAPE_PASSWORD, "web.yml")
    p, target = start_oomwatch("--replay", example("staircase.jsonl"), "--loop", "--web-config-file", web, ca=pki.ca)
    pw = secret_file(str(tmp_path), "scrape-password", SCRAPE_PASSWORD)
    prom = Prometheus(
        str(tmp_path),
        target,
        [os.path.join(ROOT, "rules", "oomwatch.rules.yml")],
        scrape_extra=(
            f"    scheme: https\n    tls_config:\n      ca_file: {pki.ca}\n"
            f"    basic_auth:\n      username: prometheus\n      password_file: {pw}\n"
        ),
    )
    try:
        got = _wait(lambda: prom.query('oomwatch_gpu_memory_total_bytes{job="oomwatch"}'))
        assert got and float(got[0]["value"][1]) > 0, "Prometheus got no oomwatch series over TLS"
        assert prom.query('up{job="oomwatch"} == 1')
        with urllib.request.urlopen(prom.url + "/api/v1/targets", timeout=5) as r:
            targets = r.read().decode()
        assert '"scrapeUrl":"https://' in targets and SCRAPE_PASSWORD not in targets
    finally:
        prom.stop()
        stop_process(p)


def test_alertmanager_behind_tls_and_basic_auth_then_a_wrong_password(tmp_path, pki, hook):
    am = _secure_alertmanager(tmp_path, pki, hook)
    pw = secret_file(str(tmp_path), "am-password", AM_PASSWORD)
    web = _web_config(tmp_path, pki, "prometheus", SCRAPE_PASSWORD, "web.yml")
    am_url = am.url.replace("https://", "https://oomwatch@")  # the user from the URL, the password from the file
    p, target = start_oomwatch(
        "--replay", example("stray.jsonl"), "--speed", "2", "--loop", "--web-config-file", web,
        "--alertmanager-url", am_url, "--alertmanager-basic-auth-password-file", pw, "--alertmanager-ca-file", pki.ca,
        ca=pki.ca,
    )  # fmt: skip
    metrics_url = f"https://{target}/metrics"

    def sink_up():
        text = _https_get(metrics_url, pki.ca, "prometheus", SCRAPE_PASSWORD)
        m = re.search(r'oomwatch_sink_up\{[^}]*sink="(alertmanager:[^"]*)"[^}]*\} (\S+)', text)
        return text, m

    try:
        got = _wait(lambda: hook.alerts("GPUStrayProcess", "firing"))
        assert got and got[0][1]["labels"]["pid"] == "928", "the pushed alert never reached the webhook"
        text, m = sink_up()
        assert m and float(m.group(2)) == 1.0
        # the password file now holds a wrong password: read again at the next push, refused with a 401
        secret_file(str(tmp_path), "am-password", WRONG_PASSWORD)
        down = _wait(lambda: (lambda t, m: m if m and float(m.group(2)) == 0.0 else None)(*sink_up()), 30)
        assert down, "oomwatch never reported the Alertmanager sink down"
        text, _ = sink_up()
        status = _https_get(f"https://{target}/api/v1/status", pki.ca, "prometheus", SCRAPE_PASSWORD)
        for shown in (text, status, down.group(1)):
            for secret in (AM_PASSWORD, WRONG_PASSWORD, SCRAPE_PASSWORD):
                assert secret not in shown
        assert "oomwatch@" not in down.group(1)  # the URL's user is redacted with the rest of its userinfo
        req = urllib.request.Request(
            am.url + "/api/v2/alerts", headers={"Authorization": _basic("oomwatch", WRONG_PASSWORD)}
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5, context=ssl.create_default_context(cafile=pki.ca))
        assert e.value.code == 401
        e.value.close()
        p.terminate()
        _, err = p.communicate(timeout=15)
        assert "HTTP 401" in err  # the warning says why ...
        for secret in (AM_PASSWORD, WRONG_PASSWORD, SCRAPE_PASSWORD):
            assert secret not in err  # ... and never the secret
    finally:
        stop_process(p)
        am.stop()


class _BearerProxy(LocalHttp):
    """A proxy in front of an Alertmanager that lets through only `Authorization: Bearer <token>`, and passes
    the request on with its own basic credentials."""

    def __init__(self, token, upstream, context, upstream_auth):
        self.seen = []
        outer = self

        class H(QuietHandler):
            def do_POST(self):
                got = self.headers.get("Authorization", "")
                outer.seen.append(got)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if got != f"Bearer {token}":
                    self.reply(401, "text/plain", b"unauthorized\n")
                    return
                req = urllib.request.Request(
                    upstream + self.path,
                    data=body,
                    headers={"Content-Type": "application/json", "Authorization": upstream_auth},
                )
                with urllib.request.urlopen(req, timeout=5, context=context) as r:
                    self.reply(r.status, "application/json", r.read())

        super().__init__(H)


def test_a_bearer_token_from_a_file_reaches_alertmanager(tmp_path, pki, hook):
    am = _secure_alertmanager(tmp_path, pki, hook)
    proxy = _BearerProxy(TOKEN, am.url, ssl.create_default_context(cafile=pki.ca), _basic("oomwatch", AM_PASSWORD))
    token = secret_file(str(tmp_path), "token", TOKEN)
    p, target = start_oomwatch(
        "--replay", example("stray.jsonl"), "--speed", "2", "--loop",
        "--alertmanager-url", proxy.base, "--alertmanager-bearer-token-file", token,
    )  # fmt: skip
    try:
        got = _wait(lambda: hook.alerts("GPUStrayProcess", "firing"))
        assert got, "the pushed alert never got through the bearer proxy"
        assert proxy.seen and all(s == f"Bearer {TOKEN}" for s in proxy.seen)
        metrics = wait_http(f"http://{target}/metrics")
        assert TOKEN not in metrics
    finally:
        stop_process(p)
        proxy.close()
        am.stop()
