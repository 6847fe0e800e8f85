"""`--web-config-file` (exporters/webconfig.py): the exporter-toolkit format checked at start, and oomwatch's own
HTTP server over real TLS with basic auth, client certificates, headers and reloads. Certificates are made here
(tests/certs.py)."""

import base64
import http.client
import os
import ssl
import subprocess
import sys
import threading

import pytest

from certs import bcrypt_hash, make_pki
from conftest import example, stop_process
from oomwatch.exporters import webconfig
from oomwatch.exporters.server import Handler, PooledHTTPServer
from oomwatch.exporters.webconfig import WebConfigError, WebConfigHolder, load
from servers import start_oomwatch

PASSWORD = "s3cret-pa55word"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def _write(tmp_path, text, name="web.yml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _tls_config(pki, extra=""):
    return f"tls_server_config:\n  cert_file: {pki.cert}\n  key_file: {pki.key}\n{extra}"


@pytest.mark.parametrize(
    "text,words",
    [
        ("nonsense: 1\n", "unknown key 'nonsense'"),
        ("tls_server_config:\n  cert_file: x.crt\n", "needs both cert_file and key_file"),
        ("tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "not supported by oomwatch"),
        ("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash"),
        ("basic_auth_users: [alice]\n", "mapping of user"),
        ("http_server_config:\n  headers:\n    Server: x\n", "cannot be set"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "must be one of deny, sameorigin"),
        ("tls_server_config: [\n", "not valid YAML"),
        ("- a\n", "must be a YAML mapping"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_file(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(WebConfigError) as e:
        load(path)
    msg = str(e.value)
    assert words in msg and path in msg and "\n" not in msg


@pytest.mark.parametrize(
    "extra,words",
    [
        ("  min_version: TLS14\n", "min_version must be one of"),
        ("  client_auth_type: RequestClientCert\n", "not supported"),
        ("  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
        ("  client_ca_file: {ca}\n", "does not verify client certificates"),
        ("  client_auth_type: Sometimes\n", "client_auth_type must be one of"),
    ],
)
def test_tls_settings_that_would_not_work_are_refused(tmp_path, pki, extra, words):
    with pytest.raises(WebConfigError, match=words):
        load(_write(tmp_path, _tls_config(pki, extra.format(ca=pki.ca))))


def test_certificate_files_that_do_not_load_are_refused(tmp_path, pki):
    with pytest.raises(WebConfigError, match="cannot load cert_file"):
        load(_write(tmp_path, f"tls_server_config:\n  cert_file: {pki.cert}\n  key_file: {pki.client_key}\n"))
    with pytest.raises(WebConfigError, match="cannot read it"):
        load(str(tmp_path / "missing.yml"))


def test_relative_paths_are_from_the_files_folder(tmp_path, pki):
    import shutil

    shutil.copy(pki.cert, tmp_path / "s.crt")
    shutil.copy(pki.key, tmp_path / "s.key")
    cfg = load(_write(tmp_path, "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n"))
    assert cfg.scheme == "https" and str(tmp_path / "s.crt") in cfg.files


def test_an_empty_file_is_plain_http_without_auth(tmp_path):
    cfg = load(_write(tmp_path, ""))
    assert cfg.ssl_context is None and cfg.authorized(None)


class _Server:
    """oomwatch's HTTP server (one route besides /healthz) with a web config, on a free port."""

    def __init__(self, path):
        handler = type(
            "H",
            (Handler,),
            {"routes": {"/": lambda: ("text/plain", b"page\n"), "/healthz": lambda: ("text/plain", b"ok\n")}},
        )
        self.web = WebConfigHolder(path)
        self.httpd = PooledHTTPServer(("127.0.0.1", 0), handler, workers=4, web=self.web)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    started = []

    def start(path):
        s = _Server(path)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def _get(port, path="/", user=None, password=None, ca=None, cert=None, key=None, tls=True):
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if tls:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_tls_and_basic_auth(tmp_path, pki, serve):
    hashed = bcrypt_hash(PASSWORD)
    text = _tls_config(pki) + (
        f"basic_auth_users:\n  prometheus: {hashed}\n"
        "http_server_config:\n  http2: true\n  headers:\n    Strict-Transport-Security: max-age=31536000\n"
        "    X-Content-Type-Options: nosniff\n"
    )
    s = serve(_write(tmp_path, text))
    code, headers, _ = _get(s.port, ca=pki.ca)
    assert code == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    assert _get(s.port, user="prometheus", password="wrong", ca=pki.ca)[0] == 401
    assert _get(s.port, user="nobody", password=PASSWORD, ca=pki.ca)[0] == 401
    code, headers, body = _get(s.port, user="prometheus", password=PASSWORD, ca=pki.ca)
    assert (code, body) == (200, b"page\n") and headers["X-Content-Type-Options"] == "nosniff"
    assert _get(s.port, user="prometheus", password=PASSWORD, ca=pki.ca)[0] == 200  # the remembered check
    assert _get(s.port, "/healthz", ca=pki.ca)[:1] == (200,)  # a kubelet's probe needs no password
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that trusts another CA
        _get(s.port, ca=pki.other_ca)
    with pytest.raises((http.client.HTTPException, OSError)):  # plain HTTP to the TLS port: no answer
        _get(s.port, tls=False)
    assert _get(s.port, user="prometheus", password=PASSWORD, ca=pki.ca)[0] == 200  # and it serves on


def test_client_certificates_required(tmp_path, pki, serve):
    text = _tls_config(
        pki, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n  min_version: TLS13\n"
    )
    s = serve(_write(tmp_path, text))
    with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
        _get(s.port, ca=pki.ca)  # no client certificate: the handshake fails
    assert _get(s.port, ca=pki.ca, cert=pki.client_cert, key=pki.client_key)[0] == 200


def test_the_file_is_read_again_on_sighup_and_when_it_changes(tmp_path, pki, serve, monkeypatch):
    path = _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  alice: {bcrypt_hash('one')}\n")
    s = serve(path)
    assert _get(s.port, user="alice", password="one", ca=pki.ca)[0] == 200
    _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  alice: {bcrypt_hash('two')}\n")
    assert s.web.reload()  # what SIGHUP does
    assert _get(s.port, user="alice", password="one", ca=pki.ca)[0] == 401
    assert _get(s.port, user="alice", password="two", ca=pki.ca)[0] == 200
    # a bad edit is logged and the config in use stays
    _write(tmp_path, "basic_auth_users: nonsense\n")
    assert not s.web.reload()
    assert _get(s.port, user="alice", password="two", ca=pki.ca)[0] == 200
    # a change is noticed by itself at a new connection
    monkeypatch.setattr(webconfig, "RECHECK_S", 0.0)
    s.web._next = 0.0
    _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  bob: {bcrypt_hash('three')}\n")
    os.utime(path, ns=(1, 1))
    assert _get(s.port, user="bob", password="three", ca=pki.ca)[0] == 200


def test_basic_auth_without_bcrypt_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "bcrypt", None)
    with pytest.raises(WebConfigError, match=r"needs the bcrypt package: pip install 'oomwatch\[web\]'"):
        load(_write(tmp_path, f"basic_auth_users:\n  alice: {'$2b$04$' + 'a' * 53}\n"))


def _oomwatch(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "oomwatch", "run", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("text", ["tls_server_config: {cert_file: /nonexistent.crt, key_file: /x.key}\n", "x: 1\n"])
def test_the_daemon_refuses_a_bad_web_config_at_start(tmp_path, text):
    r = _oomwatch("--replay", "example:staircase", "--duration", "5", "--web-config-file", _write(tmp_path, text))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("oomwatch: --web-config-file")


def test_the_daemon_serves_metrics_status_and_api_over_tls_with_basic_auth(tmp_path, pki):
    text = _tls_config(pki) + f"basic_auth_users:\n  prometheus: {bcrypt_hash(PASSWORD)}\n"
    p, target = start_oomwatch(
        "--replay", example("staircase.jsonl"), "--loop", "--web-config-file", _write(tmp_path, text), ca=pki.ca
    )
    port = int(target.rsplit(":", 1)[1])
    try:
        for path in ("/metrics", "/", "/api/v1/status"):
            assert _get(port, path, ca=pki.ca)[0] == 401, path
            code, _, body = _get(port, path, user="prometheus", password=PASSWORD, ca=pki.ca)
            assert code == 200, path
        metrics = _get(port, "/metrics", user="prometheus", password=PASSWORD, ca=pki.ca)[2]
        assert b"oomwatch_gpu_memory_used_bytes" in metrics
        p.terminate()
        _, err = p.communicate(timeout=10)
        assert "metrics on https://" in err and PASSWORD not in err
    finally:
        stop_process(p)


def test_sighup_makes_the_daemon_read_the_web_config_again(tmp_path, pki):
    import signal
    import time

    path = _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  alice: {bcrypt_hash('one')}\n")
    p, target = start_oomwatch("--replay", example("stray.jsonl"), "--loop", "--web-config-file", path, ca=pki.ca)
    port = int(target.rsplit(":", 1)[1])
    try:
        assert _get(port, "/metrics", user="alice", password="one", ca=pki.ca)[0] == 200
        _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  bob: {bcrypt_hash('two')}\n")
        p.send_signal(signal.SIGHUP)
        deadline = time.time() + 3  # well before the 5 s look at the files would notice by itself
        while time.time() < deadline and _get(port, "/metrics", user="bob", password="two", ca=pki.ca)[0] != 200:
            time.sleep(0.1)
        assert _get(port, "/metrics", user="bob", password="two", ca=pki.ca)[0] == 200
        assert _get(port, "/metrics", user="alice", password="one", ca=pki.ca)[0] == 401
        assert p.poll() is None
    finally:
        stop_process(p)


def test_a_client_that_never_finishes_its_handshake_holds_one_worker_only(tmp_path, pki, serve):
    import socket

    s = serve(_write(tmp_path, _tls_config(pki)))
    idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(3)]  # 3 of the 4 workers, silent
    try:
        assert _get(s.port, ca=pki.ca)[0] == 200  # the fourth still answers
    finally:
        for c in idle:
            c.close()
