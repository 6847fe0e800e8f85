"""Keep secrets out of everything oomwatch shows: metrics, JSON, logs and recorded traces.

Secrets are found by their shape, not by a list of flags: any flag or variable whose name has a secret word
in it (`--api-key X`, `--hf-token=X`, `OPENAI_API_KEY=X`, `password=X`), an `Authorization:` header or a
`Bearer` credential, basic credentials (`-u alice:pw`, `http://alice:pw@host`), tokens in URL query strings
(`?token=`, `api_key=`, `access_token=`), and long random-looking values (`hf_...`, `sk-...`, `ghp_...`, a JWT,
any long mixed-case base64 run). A shell string inside one argument (`sh -c '... --api-key X'`) is searched
the same way. A full command line is never exported; what is shown is the program and a few arguments, each
passed through `redact_args`. URLs shown anywhere (engine names, labels, logs) go through `redact_url`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_args", "redact_text", "redact_url", "secret_name", "short_cmdline"]

REDACTED = "<redacted>"

# Whole words (between '-', '_', '.') that make a name secret; and endings that do so glued together
# (`accessToken`, `APIKEY`). "tokens" is no secret word: `--max-num-batched-tokens 8192` stays readable.
_SECRET_WORDS = frozenset(
    {
        "key", "apikey", "token", "secret", "secrets", "password", "passwd", "pwd", "pass", "auth",
        "authorization", "credential", "credentials", "cookie", "bearer", "jwt", "signature", "sig",
        "privatekey", "accesskey",
    }
)  # fmt: skip
_SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "credential", "credentials", "privatekey")
#: Short flags that take a secret by convention (`-k KEY`); `-u`/`--user` take `user:password`.
_SECRET_SHORT = frozenset({"-k"})
_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_USER_FLAGS = frozenset({"-u", "--user", "--basic-auth", "--proxy-user"})

_KNOWN_TOKEN = (
    r"hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{8,}|github_pat_[A-Za-z0-9_]{8,}"
    r"|xox[abpr]-[A-Za-z0-9-]{8,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_.-]+|AKIA[0-9A-Z]{12,}|glpat-[A-Za-z0-9_-]{8,}"
)
_SECRET_VALUE = re.compile(_KNOWN_TOKEN)
#: A long run of base64-ish characters with upper and lower case and digits: random, so a key. Hex digests
#: and GPU UUIDs (one case) and model names (short runs, dashes) do not match.
_RANDOM_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_])(?=[A-Za-z0-9+/_]*[a-z])(?=[A-Za-z0-9+/_]*[A-Z])(?=[A-Za-z0-9+/_]*\d)"
    r"[A-Za-z0-9+/_]{32,}={0,2}"
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|cookie)(\s*[:=]\s*)"
    r"(?:(bearer|basic|token|digest)\s+)?([^\s'\"]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{6,})")
# `--name VALUE`, `--name=VALUE`, `NAME=VALUE`, `name: VALUE` inside free text; the name is judged by
# `secret_name`. A value may be quoted.
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s'\"&;]+)"
_ASSIGN = re.compile(r"(?<![\w.-])(--?)?([A-Za-z][\w.-]*)(=|:[ \t]*)" + _VALUE)
_FLAG_VALUE = re.compile(r"(?<![\w.-])(--?)([A-Za-z][\w.-]*)(\s+)(?!-)" + _VALUE)  # a value never starts with '-'
_USER_PASS = re.compile(r"(?<![\w.-])(-u|--user|--basic-auth|--proxy-user)(=|\s+)([^\s:'\"]+):([^\s'\"]+)")


def secret_name(name: str) -> bool:
    """Whether a flag or variable name says its value is a secret (`--api-key`, `HF_TOKEN`, `accessToken`)."""
    n = name.lstrip("-").lower()
    if not n:
        return False
    words = re.split(r"[-_.]+", n)
    return any(w in _SECRET_WORDS for w in words) or n.replace("-", "").replace("_", "").endswith(_SECRET_ENDINGS)


def _looks_random(value: str) -> bool:
    return bool(_SECRET_VALUE.fullmatch(value) or _RANDOM_RUN.fullmatch(value))


def _query(q: str) -> str:
    """A query string or fragment with the values of secret-named parameters, and random values, hidden."""
    out = []
    for part in q.split("&"):
        k, eq, v = part.partition("=")
        if eq and v and (secret_name(k) or _looks_random(v)):
            out.append(f"{k}={REDACTED}")
        elif not eq and _looks_random(k):
            out.append(REDACTED)
        else:
            out.append(part)
    return "&".join(out)


def redact_url(url: str) -> str:
    """The URL as it may be shown: no userinfo (`alice:pw@`), no secret query values, no tokens in the path."""
    try:
        p = urlsplit(url)
        _ = p.port
    except ValueError:
        return _text_tokens(re.sub(r"//[^/@\s]*@", f"//{REDACTED}@", url))
    netloc = p.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    path = _text_tokens(p.path)
    return urlunsplit((p.scheme, netloc, path, _query(p.query), _query(p.fragment)))


def _text_tokens(s: str) -> str:
    return _RANDOM_RUN.sub(REDACTED, _SECRET_VALUE.sub(REDACTED, s))


def _assign(m: re.Match[str]) -> str:
    dash, name, sep, value = m.group(1) or "", m.group(2), m.group(3), m.group(4)
    if REDACTED in value or value.lower() in _SCHEMES:  # `Authorization: Bearer <redacted>` is done
        return m.group(0)
    if secret_name(name) or (dash + name) in _SECRET_SHORT:
        return f"{dash}{name}{sep}{REDACTED}"
    return m.group(0)


def redact_text(text: str) -> str:
    """Free text (a shell string, a log line, a header) with every secret-shaped part replaced."""
    s = _URL.sub(lambda m: redact_url(m.group(0)), text)
    s = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{(m.group(3) + ' ') if m.group(3) else ''}{REDACTED}", s)
    s = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if REDACTED not in m.group(3) else m.group(0), s)
    s = _USER_PASS.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}:{REDACTED}", s)
    s = _ASSIGN.sub(_assign, s)  # `NAME=VALUE` first: `env API_KEY=X` is no flag `env` with value `API_KEY=X`
    s = _FLAG_VALUE.sub(_assign, s)
    return _text_tokens(s)


def redact_args(args: Iterable[object]) -> list[str]:
    """Each argument with secret values replaced, one out per one in: `--api-key X`, `--api-key=X`, `-k X`,
    `-u alice:X`, `HF_TOKEN=X`, `Authorization: Bearer X`, a URL's `alice:X@`, and the same inside a shell
    string (`sh -c '... --api-key X'`) all lose X."""
    out: list[str] = []
    hide_next = user_next = False
    for arg in args:
        arg = str(arg)
        if hide_next or user_next:
            was_user, hide_next, user_next = user_next, False, False
            if not arg.startswith("-"):
                if was_user:
                    name, colon, _ = arg.partition(":")
                    out.append(f"{name}:{REDACTED}" if colon else redact_text(arg))
                else:
                    out.append(REDACTED)
                continue
        flag, eq, value = arg.partition("=")
        if arg.startswith("-") and not eq and " " not in arg:
            if secret_name(arg) or arg in _SECRET_SHORT:
                hide_next = True
            elif arg in _USER_FLAGS:
                user_next = True
            out.append(arg if (hide_next or user_next) else redact_text(arg))
            continue
        if eq and " " not in arg and re.fullmatch(r"-{0,2}[A-Za-z_][\w.-]*", flag) and secret_name(flag):
            out.append(f"{flag}={REDACTED}")
            continue
        out.append(redact_text(arg))
    return out


def short_cmdline(args: Iterable[object], max_args: int = 4, max_len: int = 120) -> tuple[str, ...]:
    """The program's base name and its first few arguments, redacted; never the full command line."""
    args = [str(a) for a in args if a is not None]
    if not args:
        return ()
    red = redact_args(args)
    head = [os.path.basename(red[0])] + red[1 : 1 + max_args]
    if len(red) > 1 + max_args:
        head.append("...")
    total = 0
    kept: list[str] = []
    for a in head:
        a = a if len(a) <= 48 else a[:45] + "..."
        total += len(a) + 1
        if total > max_len:
            kept.append("...")
            break
        kept.append(a)
    return tuple(kept)
