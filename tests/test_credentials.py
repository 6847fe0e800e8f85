"""Credentials from files for oomwatch's outgoing calls (daemon/credentials.py): checked at start in one line,
read again at every call, never shown; and an engine scraped over real TLS with a bearer token (tests/certs.py)."""

import base64
import re
import ssl

import httpx
import pytest

from certs import make_pki, secret_file
from conftest import example, stop_process
from oomwatch.credentials import ClientAuth, read_secret
from oomwatch.errors import UsageError
from oomwatch.exporters.alertmanager import AlertmanagerPusher
from oomwatch.sources.engines import EngineSource
from servers import LocalHttp, QuietHandler, start_oomwatch, wait_http

TOKEN = "tok-91c1d2b7e5"
VLLM = b'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def test_a_secret_file_is_stripped_and_bounded(tmp_path):
    assert read_secret(secret_file(str(tmp_path), "t", f"  {TOKEN}  ")) == TOKEN
    (tmp_path / "two").write_text("a\nb\n")
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "big").write_text("x" * (65 << 10))
    for name, words in (
        ("two", "more than one line"),
        ("empty", "empty"),
        ("big", "larger than"),
        ("nope", "cannot read"),
    ):
        with pytest.raises(OSError, match=words):
            read_secret(str(tmp_path / name))
    with pytest.raises(OSError, match="not a regular file"):
        read_secret("/dev/zero")


def test_the_checks_at_start(tmp_path):
    tok = secret_file(str(tmp_path), "t", TOKEN)
    cases = [
        (ClientAuth("--engine", bearer_token_file=tok, basic_auth_password_file=tok), ["http://e"], "not both"),
        (ClientAuth("--engine", basic_auth_user="alice"), ["http://e"], "needs --engine-basic-auth-password-file"),
        (ClientAuth("--engine", basic_auth_password_file=tok), ["http://e"], "needs a user"),
        (ClientAuth("--engine", bearer_token_file=tok), ["http://alice:pw@e"], "keep the password in the file"),
        (ClientAuth("--engine", bearer_token_file=str(tmp_path / "x")), ["http://e"], "cannot read"),
        (ClientAuth("--engine", ca_file=tok), ["http://e"], "not a readable PEM CA bundle"),
    ]
    for auth, urls, words in cases:
        with pytest.raises(UsageError, match=words) as e:
            auth.check(urls)
        assert "pw" not in str(e.value) and TOKEN not in str(e.value)
    ClientAuth("--engine", basic_auth_password_file=tok).check(["http://alice@e"])  # the URL's user will do


def test_files_are_read_at_every_call_and_never_shown(tmp_path):
    tok = secret_file(str(tmp_path), "t", TOKEN)
    pw = secret_file(str(tmp_path), "p", "pw-one")
    seen = []
    transport = httpx.MockTransport(lambda r: (seen.append(r.headers.get("authorization")), httpx.Response(200))[1])
    bearer = ClientAuth("--alertmanager", bearer_token_file=tok).auth("http://am")
    basic = ClientAuth("--alertmanager", basic_auth_password_file=pw).auth("http://bob@am")
    with httpx.Client(transport=transport) as c:
        c.get("http://am/", auth=bearer)
        secret_file(str(tmp_path), "t", "tok-rotated")
        c.get("http://am/", auth=bearer)
        c.get("http://bob@am/", auth=basic)
    assert seen == [f"Bearer {TOKEN}", "Bearer tok-rotated", "Basic " + base64.b64encode(b"bob:pw-one").decode()]
    assert TOKEN not in repr(bearer) and "pw-one" not in repr(basic)
    # a token file gone at push time: that push fails, the sink is down, the reason names the file only
    (tmp_path / "t").unlink()
    pusher = AlertmanagerPusher(
        ["http://am:9093"], client=httpx.Client(transport=transport), credentials=ClientAuth(bearer_token_file=tok)
    )
    pusher._resolved[()] = {"labels": {"alertname": "x"}}
    pusher.push([], 0.0)
    (st,) = pusher.status.values()
    assert not st.up and "cannot read" in st.error and tok in st.error
    pusher.close()


class _TlsEngine(LocalHttp):
    """An engine's /metrics over TLS that answers only `Authorization: Bearer <TOKEN>`."""

    def __init__(self, pki):
        class H(QuietHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self.reply(401, "text/plain", b"unauthorized\n")
                else:
                    self.reply(200, "text/plain; version=0.0.4", VLLM)

        super().__init__(H)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(pki.cert, pki.key)
        self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.url = self.base.replace("http://", "https://")


def test_an_engine_over_tls_with_a_bearer_token(tmp_path, pki):
    eng = _TlsEngine(pki)
    try:
        good = ClientAuth("--engine", bearer_token_file=secret_file(str(tmp_path), "t", TOKEN), ca_file=pki.ca)
        good.check([eng.url])
        src = EngineSource(eng.url, auth=good.auth(eng.url), verify=good.verify(), retries=0)
        snap = src.scrape()
        assert snap.up and snap.kind == "vllm" and snap.kv_cache_usage_ratio == 0.25, snap.error
        src.close()
        wrong = ClientAuth("--engine", bearer_token_file=secret_file(str(tmp_path), "w", "nope"), ca_file=pki.ca)
        src = EngineSource(eng.url, auth=wrong.auth(eng.url), verify=wrong.verify(), retries=0)
        snap = src.scrape()
        assert not snap.up and snap.error == "HTTP 401"
        src.close()
        other = ClientAuth("--engine", ca_file=pki.other_ca)  # a certificate oomwatch does not trust
        src = EngineSource(eng.url, auth=good.auth(eng.url), verify=other.verify(), retries=0)
        snap = src.scrape()
        assert not snap.up and "certificate" in snap.error.lower() and TOKEN not in snap.error
        src.close()
    finally:
        eng.close()


def test_the_daemon_scrapes_an_engine_with_its_credential_flags(tmp_path, pki):
    eng = _TlsEngine(pki)
    token = secret_file(str(tmp_path), "t", TOKEN)
    p, target = start_oomwatch(
        "--replay", example("stray.jsonl"), "--loop", "--engine-url", eng.url, "--no-engine-discovery",
        "--engine-bearer-token-file", token, "--engine-ca-file", pki.ca,
    )  # fmt: skip
    try:
        up = re.compile(r'oomwatch_source_up\{[^}]*source="engine:https://[^"]*"[^}]*\} 1\.0')
        text = wait_http(f"http://{target}/metrics", ok=lambda t: bool(up.search(t)))
        assert "oomwatch_engine_kv_cache_usage_ratio" in text and TOKEN not in text
    finally:
        stop_process(p)
        eng.close()
