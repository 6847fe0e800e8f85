import pytest

from daemon.redact import REDACTED, redact_args, short_cmdline

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
