"""`--web-config-file`: TLS and basic auth for oomwatch's own endpoints, in Prometheus' exporter-toolkit format.

The file is the one node_exporter, Alertmanager and Prometheus itself take (https://prometheus.io/docs/
prometheus/latest/configuration/https/), so one file, one set of certificates and one bcrypt hash per user
serve a whole monitoring stack:

    tls_server_config:
      cert_file: server.crt            # both or neither; relative paths are from the file's folder
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), VerifyClientCertIfGiven
      client_ca_file: clients-ca.crt   # with a verifying client_auth_type, and only then
      min_version: TLS12               # TLS10..TLS13 (default TLS12); max_version too
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}   # the toolkit's allowed headers only
      http2: true                      # accepted and ignored: oomwatch answers HTTP/1.0
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

What oomwatch does not do is refused at start rather than silently weakened: an unknown key, cipher_suites,
curve_preferences, client_allowed_sans, and RequestClientCert / RequireAnyClientCert (Python's ssl verifies
every client certificate it asks for). A bad, unreadable or refused file is one line and exit 2 at start.

Every endpoint asks for basic auth except `/healthz`, which says nothing but "ok": a kubelet's liveness
probe cannot send credentials. With TLS, /healthz is served over TLS like the rest.

The file is read again on SIGHUP, and by itself when it, or a certificate, key or CA file it names, changes
(looked at no more than every `RECHECK_S`, at a new connection): a certificate renewed in place (cert-manager,
a Kubernetes Secret) is served without a restart. A reload that fails keeps the config in use and logs one
line.

bcrypt (the `bcrypt` package, the `web` extra with PyYAML for the file) is imported only when a file has
`basic_auth_users`; a config that needs it without it is refused at start, saying what to install. A
successful check is remembered (by a SHA-256 of user, password and hash, in memory, bounded) so that a
scrape every 15 s costs one bcrypt once, as the toolkit does; an unknown user costs a bcrypt too, so its
answer takes as long as a wrong password's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oomwatch.errors import UsageError

__all__ = ["OPEN_PATHS", "RECHECK_S", "WebConfig", "WebConfigError", "WebConfigHolder", "load"]

log = logging.getLogger("oomwatch.http")

#: Paths served without basic auth (nothing on them but "ok").
OPEN_PATHS = frozenset({"/healthz"})
#: At most this often, a new connection looks whether the files changed.
RECHECK_S = 5.0
#: Remembered successful basic auth checks at most.
_CACHE_MAX = 64

_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_NOT_SUPPORTED = {
    "RequestClientCert": "Python's ssl verifies every client certificate it asks for; use VerifyClientCertIfGiven",
    "RequireAnyClientCert": "Python's ssl verifies every client certificate it asks for; use "
    "RequireAndVerifyClientCert",
}
#: The headers the exporter-toolkit lets a web config set, with the values it allows (None: any).
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "strict-transport-security": None,
    "x-content-type-options": ("nosniff",),
    "x-frame-options": ("deny", "sameorigin"),
    "x-xss-protection": None,
    "content-security-policy": None,
}
_KEYS = {
    "": {"tls_server_config", "http_server_config", "basic_auth_users"},
    "tls_server_config": {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"},
    "http_server_config": {"headers", "http2"},
}
_TOOLKIT_ONLY = {
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
    "cert",
    "key",
}
_BCRYPT = re.compile(r"\$2[abxy]?\$[0-9]{2}\$[./A-Za-z0-9]{53}")


class WebConfigError(UsageError):
    """A web config that cannot be used: one line naming the file and what is wrong."""


@dataclass(frozen=True)
class WebConfig:
    """One loaded web config. `ssl_context` None: plain HTTP; `users` empty: no basic auth."""

    path: str
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()
    files: tuple[str, ...] = ()  # every file it was built from (the config, certificates, keys, CAs)
    _ok: dict[bytes, bool] = field(default_factory=dict, repr=False, compare=False)
    _dummy: bytes = field(default=b"", repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def authorized(self, header: str | None) -> bool:
        """Whether an `Authorization` header carries a configured user and its password (True without users)."""
        if not self.users:
            return True
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            user, colon, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        if not colon:
            return False
        hashed = self.users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed or b""))).digest()
        with self._lock:
            if self._ok.get(key):
                return True
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
        except ValueError:  # a password longer than bcrypt takes (72 bytes)
            ok = False
        if ok:
            with self._lock:
                if len(self._ok) >= _CACHE_MAX:
                    self._ok.clear()
                self._ok[key] = True
        return ok

    @property
    def scheme(self) -> str:
        return "http" if self.ssl_context is None else "https"


def _fail(path: str, msg: str) -> WebConfigError:
    return WebConfigError(f"--web-config-file {path}: {msg}")


def _section(path: str, doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    v = doc.get(name)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _fail(path, f"{name} must be a mapping")
    for k in v:
        if k in _TOOLKIT_ONLY:
            raise _fail(path, f"{name}.{k} is not supported by oomwatch")
        if k not in _KEYS[name]:
            raise _fail(path, f"unknown key {name}.{k}")
    return v


def _text(path: str, where: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _fail(path, f"{where} must be a non-empty string")
    return v


def load(path: str) -> WebConfig:
    """Read and check a web config; WebConfigError (one line, exit 2) for anything that would not work."""
    try:
        import yaml
    except ImportError:
        raise _fail(path, "reading it needs PyYAML: pip install 'oomwatch[web]'") from None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would block or flood the start
            raise _fail(path, "not a regular file")
        with open(path, "rb") as f:
            raw = f.read(1 << 20)
        doc = yaml.safe_load(raw.decode("utf-8")) or {}
    except OSError as e:
        raise _fail(path, f"cannot read it: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as e:
        raise _fail(path, f"not valid YAML: {' '.join(str(e).split())[:160]}") from None
    if not isinstance(doc, dict):
        raise _fail(path, "must be a YAML mapping")
    for k in doc:
        if k not in _KEYS[""]:
            raise _fail(path, f"unknown key {k!r}")
    base = os.path.dirname(os.path.abspath(path))
    files = [path]

    def file_(where: str, v: Any) -> str:
        p = os.path.join(base, _text(path, where, v))
        files.append(p)
        return p

    tls = _section(path, doc, "tls_server_config")
    ctx = None
    if tls.get("cert_file") or tls.get("key_file"):
        if not (tls.get("cert_file") and tls.get("key_file")):
            raise _fail(path, "tls_server_config needs both cert_file and key_file")
        ctx = _tls_context(path, tls, file_)
    elif tls:
        raise _fail(path, "tls_server_config needs cert_file and key_file")

    http = _section(path, doc, "http_server_config")
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise _fail(path, "http_server_config.headers must be a mapping")
    if "http2" in http and not isinstance(http["http2"], bool):
        raise _fail(path, "http_server_config.http2 must be true or false")
    shown: list[tuple[str, str]] = []
    for name, value in headers.items():
        n = str(name)
        if n.lower() not in _HEADERS:
            raise _fail(path, f"header {n!r} cannot be set (allowed: {', '.join(sorted(_HEADERS))})")
        v = _text(path, f"header {n}", value)
        allowed = _HEADERS[n.lower()]
        if allowed is not None and v.lower() not in allowed:
            raise _fail(path, f"header {n} must be one of {', '.join(allowed)}")
        if not v.isprintable():
            raise _fail(path, f"header {n}: the value must be printable on one line")
        shown.append((n, v))

    users_raw = doc.get("basic_auth_users") or {}
    if not isinstance(users_raw, dict):
        raise _fail(path, "basic_auth_users must be a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in users_raw.items():
        u = str(user)
        if not u or ":" in u:
            raise _fail(path, f"basic_auth_users: {u!r} is not a user name (no ':')")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise _fail(path, f"basic_auth_users.{u}: not a bcrypt hash ($2y$10$ and 53 characters)")
        users[u] = hashed.encode()
    dummy = b""
    if users:
        try:
            import bcrypt
        except ImportError:
            raise _fail(path, "basic_auth_users needs the bcrypt package: pip install 'oomwatch[web]'") from None
        dummy = bcrypt.hashpw(b"oomwatch", bcrypt.gensalt(rounds=10))
    return WebConfig(path, ctx, users, tuple(shown), tuple(files), _dummy=dummy)


def _no_passphrase() -> bytes:
    raise ValueError("the key is encrypted; give key_file unencrypted (as the exporter-toolkit takes it)")


def _tls_context(path: str, tls: Mapping[str, Any], file_: Any) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for key, attr, default in (("min_version", "minimum_version", "TLS12"), ("max_version", "maximum_version", None)):
        v = tls.get(key, default)
        if v is None:
            continue
        if v not in _VERSIONS:
            raise _fail(path, f"tls_server_config.{key} must be one of {', '.join(_VERSIONS)}, not {v!r}")
        try:
            setattr(ctx, attr, _VERSIONS[v])
        except (ValueError, ssl.SSLError) as e:
            raise _fail(path, f"tls_server_config.{key} {v}: {e}") from None
    cert, key = (
        file_("tls_server_config.cert_file", tls["cert_file"]),
        file_("tls_server_config.key_file", tls["key_file"]),
    )
    try:
        ctx.load_cert_chain(cert, key, password=_no_passphrase)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise _fail(path, f"cannot load cert_file {cert} with key_file {key}: {_why(e)}") from None
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth in _NOT_SUPPORTED:
        raise _fail(path, f"client_auth_type {auth} is not supported: {_NOT_SUPPORTED[auth]}")
    if auth not in _CLIENT_AUTH:
        raise _fail(path, f"client_auth_type must be one of {', '.join(_CLIENT_AUTH)}, not {auth!r}")
    ca = tls.get("client_ca_file")
    if _CLIENT_AUTH[auth] == ssl.CERT_NONE:
        if ca:
            raise _fail(path, "client_ca_file is given but client_auth_type does not verify client certificates")
    else:
        if not ca:
            raise _fail(path, f"client_auth_type {auth} needs client_ca_file")
        ca_path = file_("tls_server_config.client_ca_file", ca)
        try:
            ctx.load_verify_locations(cafile=ca_path)
        except (OSError, ValueError) as e:
            raise _fail(path, f"cannot load client_ca_file {ca_path}: {_why(e)}") from None
        ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def _why(e: BaseException) -> str:
    return " ".join(str(getattr(e, "strerror", None) or getattr(e, "reason", None) or e).split())[:160]


def _stamp(files: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for f in files:
        try:
            st = os.stat(f)  # follows symlinks: a Kubernetes Secret mount swaps the link's target
            out.append((st.st_mtime_ns, st.st_ino, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class WebConfigHolder:
    """The web config in use: loaded at start (WebConfigError if it cannot be), read again on `reload()`
    (SIGHUP) and when its files change; a failed reload keeps the config in use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._config = load(path)
        self._stamp = _stamp(self._config.files)
        self._next = time.monotonic() + RECHECK_S
        self._lock = threading.Lock()

    def current(self) -> WebConfig:
        """The config for a new connection (reloaded first if a file changed since the last look)."""
        now = time.monotonic()
        if now >= self._next:
            with self._lock:
                if now >= self._next:
                    self._next = now + RECHECK_S
                    if _stamp(self._config.files) != self._stamp:
                        self._reload_locked("a file changed")
        return self._config

    def reload(self) -> bool:
        with self._lock:
            return self._reload_locked("SIGHUP")

    def _reload_locked(self, why: str) -> bool:
        try:
            cfg = load(self.path)
        except WebConfigError as e:
            self._stamp = _stamp(self._config.files)  # once per change, not at every connection
            log.error("%s (%s); keeping the web config in use", e, why)
            return False
        self._config, self._stamp = cfg, _stamp(cfg.files)
        log.info("web config reloaded from %s (%s)", self.path, why)
        return True

    @property
    def scheme(self) -> str:
        return self._config.scheme
