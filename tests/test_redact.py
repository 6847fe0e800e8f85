from daemon.redact import redact_args, short_cmdline


def test_secrets_are_redacted():
    args = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--api-key", "s3cret", "--token=abc",
            "HF_TOKEN=hf_abcdefghijklmnop", "--model", "sk-1234567890abcdef", "OPENAI_API_KEY=xyz"]
    out = " ".join(redact_args(args))
    for secret in ("s3cret", "abc", "hf_abcdefghijklmnop", "sk-1234567890abcdef", "xyz"):
        assert secret not in out.split("=")[-1] or secret not in out
    assert "s3cret" not in out and "hf_abcdefghijklmnop" not in out and "sk-1234567890abcdef" not in out
    assert "--api-key <redacted>" in out and "--token=<redacted>" in out


def test_short_cmdline_is_short_and_never_full():
    args = ["/usr/bin/python3", "serve.py"] + [f"--opt{i}" for i in range(50)] + ["--api-key", "zzz"]
    s = short_cmdline(args)
    assert s[0] == "python3" and s[-1] == "..." and len(s) <= 7
    assert "zzz" not in " ".join(s)
