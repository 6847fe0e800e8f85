"""`oomwatch engines` and `oomwatch diagnose` take `run`'s engine credential flags (one definition:
cli.credential_flags) and scrape real HTTP servers that demand a bearer token over TLS or basic auth; a
secret never appears in their output, JSON or logs, and bad credential flags are one line and exit 2."""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import subprocess
import sys

import pytest

from certs import make_pki, secret_file
from conftest import ROOT
from fake_nvml import FakeNvml
from oomwatch import cli, wiring
from oomwatch.sources.nvml import NvmlSource
from servers import LocalHttp, QuietHandler

TOKEN = "tok-5e1f0c9a77"
PASSWORD = "pw-3b8d41e2"
USER = "bob"
CRED_FLAGS = (
    "--engine-bearer-token-file",
    "--engine-basic-auth-user",
    "--engine-basic-auth-password-file",
    "--engine-ca-file",
)
# A vLLM's /metrics (a KV cache nearly full, requests waiting).
VLLM = (
    b"# TYPE vllm:kv_cache_usage_perc gauge\n"
    b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{engine="0",model_name="m"} 4\n'
)
GiB = 1 << 30


class Engine(LocalHttp):
    """An engine's /metrics that answers only the one `Authorization` it expects (else 401); over TLS with
    the test PKI's server certificate when given one."""

    def __init__(self, authorization: str, pki=None):
        self.answered: list[int] = []  # the status of every request, in order
        answered = self.answered

        class H(QuietHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != authorization:
                    answered.append(401)
                    self.reply(401, "text/plain", b"unauthorized\n")
                else:
                    answered.append(200)
                    self.reply(200, "text/plain; version=0.0.4", VLLM)

        super().__init__(H)
        self.url = self.base
        if pki is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(pki.cert, pki.key)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
            self.url = self.base.replace("http://", "https://")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def tls_engine(pki):
    eng = Engine(f"Bearer {TOKEN}", pki)
    yield eng
    eng.close()


@pytest.fixture
def basic_engine():
    eng = Engine(basic(USER, PASSWORD))
    yield eng
    eng.close()


def oomwatch(*args: str) -> subprocess.CompletedProcess:
    """The real command line, in its own process: (rc, stdout, stderr) as a user sees them."""
    return subprocess.run(
        [sys.executable, "-m", "oomwatch", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def assert_no_secret(*texts: str) -> None:
    for t in texts:
        assert TOKEN not in t and PASSWORD not in t, t


def test_the_credential_flags_are_one_definition():
    """run, diagnose and engines take the same four engine flags, with the same help."""
    cmds = cli.subcommands(cli.build_parser())

    def flags(name):
        return {
            s: a.help.split(" [OOMWATCH_")[0].replace("each URL", "each --engine-url")
            for a in cmds[name]._actions
            for s in a.option_strings
            if s in CRED_FLAGS
        }

    assert set(flags("run")) == set(CRED_FLAGS)
    assert flags("diagnose") == flags("run") == flags("engines")


def test_engines_reads_an_engine_over_tls_with_a_bearer_token(tmp_path, pki, tls_engine):
    token = secret_file(str(tmp_path), "token", TOKEN)
    good = oomwatch("-v", "engines", tls_engine.url, "--json",
                    "--engine-bearer-token-file", token, "--engine-ca-file", pki.ca)  # fmt: skip
    assert good.returncode == 0, good.stderr
    (snap,) = [json.loads(line) for line in good.stdout.splitlines()]
    assert snap["up"] and snap["kind"] == "vllm" and snap["kv_cache_usage_ratio"] == 0.97
    prose = oomwatch("engines", tls_engine.url, "--engine-bearer-token-file", token, "--engine-ca-file", pki.ca)
    assert prose.returncode == 0 and "KV cache used 97.0%" in prose.stdout
    without = oomwatch("engines", tls_engine.url, "--engine-ca-file", pki.ca)
    assert without.returncode == 1 and "DOWN: HTTP 401" in without.stdout
    untrusted = oomwatch("engines", tls_engine.url, "--engine-bearer-token-file", token,
                         "--engine-ca-file", pki.other_ca)  # fmt: skip
    assert untrusted.returncode == 1 and "certificate" in untrusted.stdout.lower()
    assert_no_secret(*(r.stdout + r.stderr for r in (good, prose, without, untrusted)))


def test_engines_reads_an_engine_with_basic_auth(tmp_path, basic_engine):
    pw = secret_file(str(tmp_path), "pw", PASSWORD)
    flag = oomwatch("-v", "engines", basic_engine.url, "--json",
                    "--engine-basic-auth-user", USER, "--engine-basic-auth-password-file", pw)  # fmt: skip
    assert flag.returncode == 0 and json.loads(flag.stdout)["up"], flag.stdout + flag.stderr
    url_user = basic_engine.url.replace("http://", f"http://{USER}@")  # the URL's own user, the password's file
    in_url = oomwatch("engines", url_user, "--engine-basic-auth-password-file", pw)
    assert in_url.returncode == 0 and "KV cache used 97.0%" in in_url.stdout, in_url.stdout
    wrong = oomwatch("engines", basic_engine.url, "--engine-basic-auth-user", USER,
                     "--engine-basic-auth-password-file", secret_file(str(tmp_path), "bad", "nope"))  # fmt: skip
    assert wrong.returncode == 1 and "DOWN: HTTP 401" in wrong.stdout
    assert_no_secret(*(r.stdout + r.stderr for r in (flag, in_url, wrong)))


@pytest.mark.parametrize("cmd", [["engines"], ["diagnose", "--duration", "1", "--engine-url"]])
def test_bad_credential_flags_are_one_line_and_exit_2(tmp_path, cmd):
    token = secret_file(str(tmp_path), "token", TOKEN)
    pw = secret_file(str(tmp_path), "pw", PASSWORD)
    url = "http://127.0.0.1:9"
    cases = [
        ([url, "--engine-bearer-token-file", str(tmp_path / "missing")], "cannot read"),
        ([url, "--engine-bearer-token-file", token, "--engine-basic-auth-password-file", pw], "not both"),
        ([url, "--engine-basic-auth-user", USER], "needs --engine-basic-auth-password-file"),
        ([url, "--engine-basic-auth-password-file", pw], "needs a user"),
        ([f"http://{USER}:{PASSWORD}@127.0.0.1:9", "--engine-bearer-token-file", token], "keep the password"),
        ([url, "--engine-ca-file", token], "not a readable PEM CA bundle"),
        ([url, "--engine-basic-auth-user", "a:b"], "not a basic auth user name"),
    ]
    for args, words in cases:
        r = oomwatch(*cmd, *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert_no_secret(r.stdout, r.stderr)


@pytest.fixture
def fake_card(monkeypatch):
    """Live diagnose on a card that does not exist here: NVML is the fake at the pynvml boundary; the
    process holding memory (this test) and the engine are real."""
    nv = FakeNvml(cards=1)
    nv.cards[0].update(used=40 * GiB, procs=[(os.getpid(), 40 * GiB)])

    def open_fake(cfg):
        src = NvmlSource(lib=nv)
        src.open()
        return src

    monkeypatch.setattr(wiring, "open_source", open_fake)
    return nv


def diagnose(capsys, *args: str) -> tuple[dict, str]:
    rc = cli.main(["-v", "diagnose", "--duration", "2.5", "--interval", "0.1", "--json",
                   "--no-engine-discovery", *args])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    return json.loads(out.strip().splitlines()[-1])["summary"], out + err


def test_live_diagnose_scrapes_an_engine_with_its_credentials(tmp_path, pki, tls_engine, fake_card, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    token = secret_file(str(tmp_path), "token", TOKEN)
    summary, text = diagnose(capsys, "--engine-url", tls_engine.url,
                             "--engine-bearer-token-file", token, "--engine-ca-file", pki.ca)  # fmt: skip
    assert "telemetry_down" not in {f["kind"] for f in summary["findings"]}, summary["findings"]
    assert tls_engine.answered and set(tls_engine.answered) == {200}  # every scrape got through
    tls_engine.answered.clear()
    refused, text2 = diagnose(capsys, "--engine-url", tls_engine.url, "--engine-ca-file", pki.ca)
    (down,) = [f for f in refused["findings"] if f["kind"] == "telemetry_down"]
    assert down["evidence"]["error"] == "HTTP 401" and set(tls_engine.answered) == {401}
    assert_no_secret(text, text2, caplog.text, json.dumps(summary), json.dumps(refused))
