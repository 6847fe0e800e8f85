import pytest

from oomwatch.redact import REDACTED, redact_args, short_cmdline

SECRETS = ("s3cret", "abc", "hf_abcdefghijklmnop", "sk-1234567890abcdef", "xyz")
ARGS = [
    "python3",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--api-key",
    "s3cret",
    "--token=abc",
    "HF_TOKEN=hf_abcdefghijklmnop",
    "--model",
    "sk-1234567890abcdef",
    "OPENAI_API_KEY=xyz",
]


def assert_redacted(redact):
    """Every secret gone from every argument, everything else kept, one argument out per argument in."""
    out = [str(a) for a in redact(ARGS)]
    assert len(out) == len(ARGS)
    for secret in SECRETS:
        assert not any(secret in a for a in out), f"{secret!r} leaked: {out}"
    assert out[:4] == ARGS[:4] and out[7] == "--model"  # what is not secret stays readable
    assert out[4] == REDACTED and out[5] == f"--token={REDACTED}" and out[6] == f"HF_TOKEN={REDACTED}"
    assert out[8] == REDACTED and out[9] == f"OPENAI_API_KEY={REDACTED}"


def test_secrets_are_redacted():
    assert_redacted(redact_args)


@pytest.mark.parametrize(
    "broken",
    [
        lambda args: list(args),  # redacts nothing
        lambda args: [a.replace("s3cret", REDACTED) for a in args],  # only one of them
        lambda args: [REDACTED if "=" in a else a for a in args],  # the assignments, not the flag's value
    ],
)
def test_the_check_fails_on_a_broken_redactor(broken):
    with pytest.raises(AssertionError):
        assert_redacted(broken)


def test_short_cmdline_is_short_and_never_full():
    args = ["/usr/bin/python3", "serve.py"] + [f"--opt{i}" for i in range(50)] + ["--api-key", "zzz"]
    s = short_cmdline(args)
    assert s[0] == "python3" and s[-1] == "..." and len(s) <= 7
    assert "zzz" not in " ".join(s)


# ---- #22: redaction by shape, not by a list of flags ---------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from oomwatch.redact import redact_text, redact_url  # noqa: E402

SHAPES = [
    (["sh", "-c", "exec vllm serve m --api-key S3CR3Tx --port 8000"], "S3CR3Tx"),
    (["curl", "-H", "Authorization: Bearer abc.def-123456", "http://h/x"], "abc.def-123456"),
    (["curl", "-H", "authorization: Basic YWxpY2U6cHc9PQ=="], "YWxpY2U6cHc9PQ=="),
    (["tool", "-k", "SECRETK3Y"], "SECRETK3Y"),
    (["vllm", "--token=tok3n-value"], "tok3n-value"),
    (["app", "password=hunter22"], "hunter22"),
    (["curl", "-u", "alice:pw-basic-1"], "pw-basic-1"),
    (["curl", "--user=alice:pw-basic-2"], "pw-basic-2"),
    (["x", "hf_abcdefghijklmnopqrstu"], "hf_abcdefghijklmnopqrstu"),
    (["x", "sk-proj-abcdefghij1234567890"], "sk-proj-abcdefghij1234567890"),
    (["x", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"], "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    (["x", "--config", "aZ9kQ2mP7vX4nB8cL1dR6sT3wY5eU0fGhJ"], "aZ9kQ2mP7vX4nB8cL1dR6sT3wY5eU0fGhJ"),
    (["x", "http://alice:s3cret@host:8000/metrics"], "s3cret"),
    (["x", "http://host/metrics?token=qq1&a=1"], "qq1"),
    (["x", "https://host/v1?api_key=zz2"], "zz2"),
    (["x", "https://host/v1?x=1&access_token=yy3#frag"], "yy3"),
    (["bash", "-lc", "HF_TOKEN=hf_zzzzzzzzzzzz python serve.py --hf-token 'quoted s3cr3t'"], "s3cr3t"),
    (["x", "--db-password", "pw-after-flag"], "pw-after-flag"),
    (["x", "--accessToken", "camel-case-secret"], "camel-case-secret"),
]


@pytest.mark.parametrize("args,secret", SHAPES)
def test_secrets_are_found_by_their_shape(args, secret):
    out = redact_args(args)
    assert len(out) == len(args) and not any(secret in a for a in out), out
    assert REDACTED in " ".join(out)


def test_what_is_not_secret_stays_readable():
    args = [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--max-num-batched-tokens",
        "8192",
        "--gpu-memory-utilization",
        "0.9",
        "CUDA_VISIBLE_DEVICES=GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",
        "--port",
        "8000",
    ]
    assert redact_args(args) == args
    assert redact_url("http://localhost:8000/metrics") == "http://localhost:8000/metrics"
    assert redact_text("no key found on GPU 0") == "no key found on GPU 0"


def test_redact_url():
    assert redact_url("http://alice:s3cret@host:8000/metrics") == f"http://{REDACTED}@host:8000/metrics"
    u = redact_url("https://host/m?token=abc&keep=1&access_token=def&api_key=ghi")
    assert "abc" not in u and "def" not in u and "ghi" not in u and "keep=1" in u
    assert "s3cret" not in redact_url("http://alice:s3cret@[::1")  # not even a valid URL


def test_engine_names_and_snapshots_never_carry_url_credentials():
    from oomwatch.sources.engines import EngineSource

    e = EngineSource("http://alice:s3cret@127.0.0.1:9/metrics?token=t0k", timeout_s=0.2, retries=0)
    s = e.scrape()
    e.close()
    for shown in (e.name, e.status.name, s.url, e.last.url, str(s.error)):
        assert "s3cret" not in shown and "t0k" not in shown, shown


SECRET = st.text(alphabet="abcdefghijkXYZ0123456789_-", min_size=6, max_size=20).map(lambda s: "Q" + s + "9")
NAME = st.sampled_from(
    [
        "api-key",
        "API_KEY",
        "token",
        "hf-token",
        "auth-token",
        "password",
        "db-password",
        "secret",
        "client-secret",
        "accessToken",
        "OPENAI_API_KEY",
        "private-key",
        "apikey",
    ]
)


@st.composite
def secret_variants(draw):
    """A secret in one of the shapes it takes on a command line, in a shell string, in a URL."""
    s, name = draw(SECRET), draw(NAME)
    dash = draw(st.sampled_from(["--", "-", ""]))
    form = draw(st.integers(0, 7))
    if form == 0:
        args = [f"{dash or '--'}{name}", s]
    elif form == 1:
        args = [f"{dash}{name}={s}"]
    elif form == 2:
        args = ["sh", "-c", f"exec server --port 1 {dash or '--'}{name} {s} --model m"]
    elif form == 3:
        args = ["sh", "-c", f"env {name.upper().replace('-', '_')}={s} server"]
    elif form == 4:
        args = ["curl", "-H", f"Authorization: {draw(st.sampled_from(['Bearer', 'Basic', 'token']))} {s}"]
    elif form == 5:
        args = [f"http://user:{s}@host:1/metrics"]
    elif form == 6:
        q = draw(st.sampled_from(["token", "api_key", "access_token", "apikey", "auth", "password", "sig"]))
        args = [f"https://host/p?a=1&{q}={s}&b=2"]
    else:
        args = ["sh", "-c", f"curl 'http://host/m?{draw(st.sampled_from(['token', 'api_key']))}={s}' -u bob:{s}"]
    return args, s


@settings(max_examples=200, deadline=None)
@given(secret_variants())
def test_generated_variants_never_leak(case):
    args, secret = case
    out = redact_args(args)
    assert len(out) == len(args)
    assert not any(secret in a for a in out), (args, out)
