"""Credentials for oomwatch's outgoing calls (Alertmanager pushes, engine scrapes), read from files.

A secret is never a flag value or a variable: those show in `ps`, in `/proc/PID/cmdline` and in a pod's
spec. Each kind of server oomwatch calls has the same four flags, as Prometheus' own `http_config` has:

    --<kind>-bearer-token-file FILE       `Authorization: Bearer <the file's content>`
    --<kind>-basic-auth-user USER         basic auth user (or the URL's own `http://USER@host`)
    --<kind>-basic-auth-password-file F   basic auth password
    --<kind>-ca-file FILE                 PEM CA bundle that the server's certificate must chain to
                                          (instead of the system's trust store)

A token or password file is read again on every request, as Prometheus does, so a rotated secret (a
Kubernetes projected service-account token, a Secret updated in place) is used without a restart; it is
checked once at start, so a missing or empty file fails there in one line (exit 2). Surrounding white space
(the newline an editor or `echo` adds) is not part of the secret. Nothing here keeps a secret in an
attribute, a `repr` or an error message: only file names are shown, and URLs through `redact_url`.
"""

from __future__ import annotations

import base64
import functools
import os
import stat
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from .errors import UsageError
from .redact import redact_url

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = ["MAX_SECRET_BYTES", "ClientAuth", "SecretFileError", "check_secret_file", "read_secret"]

#: A token or password file longer than this is no secret file (a JWT is a few kB): refused, not read on.
MAX_SECRET_BYTES = 64 << 10


class SecretFileError(OSError):
    """A secret file that cannot be used; the message names the file, never its content."""


def read_secret(path: str, what: str = "secret file") -> str:
    """The secret in `path`, stripped of surrounding white space. Only a regular file (a symlink to one, as a
    Kubernetes Secret mount has, is fine) is read, at most MAX_SECRET_BYTES: a FIFO or a device never blocks
    or floods the daemon."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise SecretFileError(f"{what} {path!r}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except SecretFileError:
        raise
    except (OSError, ValueError) as e:  # missing, unreadable, a name with a NUL byte
        raise SecretFileError(f"{what} {path!r}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise SecretFileError(f"{what} {path!r}: larger than {MAX_SECRET_BYTES >> 10} KiB, not a secret file")
    try:
        secret = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretFileError(f"{what} {path!r}: not UTF-8 text") from None
    if not secret:
        raise SecretFileError(f"{what} {path!r}: empty")
    if any(c in secret for c in "\r\n\0"):
        raise SecretFileError(f"{what} {path!r}: more than one line")
    return secret


def check_secret_file(path: str, what: str = "secret file") -> None:
    """Raise UsageError (one line, exit 2) unless `path` holds a usable secret."""
    try:
        read_secret(path, what)
    except SecretFileError as e:
        raise UsageError(str(e)) from None


@functools.cache  # one class (httpx is imported only once a credential is used)
def _file_auth_class() -> type[httpx.Auth]:
    import httpx

    class FileAuth(httpx.Auth):
        """Sets `Authorization` from a file read at each request: `Bearer <token>`, or basic auth."""

        def __init__(self, what: str, path: str, user: str | None = None) -> None:
            self.what, self.path, self.user = what, path, user

        def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
            secret = read_secret(self.path, self.what)  # SecretFileError: the call fails, the sink is down
            if self.user is None:
                request.headers["Authorization"] = f"Bearer {secret}"
            else:
                pair = base64.b64encode(f"{self.user}:{secret}".encode()).decode("ascii")
                request.headers["Authorization"] = f"Basic {pair}"
            yield request

        def __repr__(self) -> str:
            return f"FileAuth({self.what} {self.path!r})"

    return FileAuth


@dataclass(frozen=True)
class ClientAuth:
    """How oomwatch authenticates to one kind of server and checks its certificate; `flag` is the flags'
    common prefix (`--alertmanager`, `--engine`), for messages. Holds file names only, never a secret."""

    flag: str = "--alertmanager"
    bearer_token_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password_file: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_args(cls, args: object, kind: str) -> ClientAuth:
        """The `--<kind>-*` credential flags of parsed arguments (cli.credential_flags) as one ClientAuth;
        a command without them gets none."""
        return cls(
            f"--{kind}",
            bearer_token_file=getattr(args, f"{kind}_bearer_token_file", None),
            basic_auth_user=getattr(args, f"{kind}_basic_auth_user", None),
            basic_auth_password_file=getattr(args, f"{kind}_basic_auth_password_file", None),
            ca_file=getattr(args, f"{kind}_ca_file", None),
        )

    def _user(self, url: str) -> str | None:
        if self.basic_auth_user:
            return self.basic_auth_user
        try:
            u = urlsplit(url).username
        except ValueError:
            return None
        return unquote(u) if u else None

    def check(self, urls: Iterable[str]) -> None:
        """Refuse, in one line (UsageError), what would fail at every call: a file that cannot be read, a
        bearer token and basic auth together, a password without a user, a user without a password, a URL
        with a password of its own besides a password file, a CA file that is no PEM certificate."""
        f = self.flag
        if self.bearer_token_file and (self.basic_auth_password_file or self.basic_auth_user):
            raise UsageError(f"{f}-bearer-token-file and {f}-basic-auth-*: give one way to authenticate, not both")
        if self.basic_auth_user and not self.basic_auth_password_file:
            raise UsageError(f"{f}-basic-auth-user needs {f}-basic-auth-password-file")
        if self.bearer_token_file:
            check_secret_file(self.bearer_token_file, f"{f}-bearer-token-file")
        if self.basic_auth_password_file:
            check_secret_file(self.basic_auth_password_file, f"{f}-basic-auth-password-file")
        for url in urls:
            try:
                has_password = urlsplit(url).password is not None
            except ValueError:
                has_password = False
            if (self.bearer_token_file or self.basic_auth_password_file) and has_password:
                raise UsageError(
                    f"{redact_url(url)} has a password in the URL and a {f}-* credential file is given: "
                    "keep the password in the file only"
                )
            if self.basic_auth_password_file and not self._user(url):
                raise UsageError(
                    f"{f}-basic-auth-password-file needs a user: {f}-basic-auth-user USER, or "
                    f"http://USER@host in the URL ({redact_url(url)})"
                )
        if self.ca_file:
            self.verify()

    def auth(self, url: str) -> httpx.Auth | None:
        """The auth for calls to `url`, or None (then a URL's own `user:password@` still applies, as httpx
        does by default)."""
        cls: Any = _file_auth_class()
        if self.bearer_token_file:
            auth: httpx.Auth = cls(f"{self.flag}-bearer-token-file", self.bearer_token_file)
            return auth
        if self.basic_auth_password_file:
            auth = cls(f"{self.flag}-basic-auth-password-file", self.basic_auth_password_file, self._user(url) or "")
            return auth
        return None

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify`: the system's trust store (True), or a context that trusts `ca_file` only."""
        if not self.ca_file:
            return True
        import ssl

        try:
            if not stat.S_ISREG(os.stat(self.ca_file).st_mode):  # a device or FIFO would block or flood
                raise UsageError(f"{self.flag}-ca-file {self.ca_file!r}: not a regular file")
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ValueError, ssl.SSLError) as e:
            why = getattr(e, "strerror", None) or getattr(e, "reason", None) or e
            raise UsageError(f"{self.flag}-ca-file {self.ca_file!r}: not a readable PEM CA bundle ({why})") from None
