"""Which Docker engine a job uses, chosen as the docker CLI chooses.

`--docker-host` (a URL, a name from `%config TrainerMagics.docker_hosts`, or a
Docker context's name) wins; else `DOCKER_HOST`, then `DOCKER_CONTEXT`, then the
current context of the docker CLI's config, then the local socket. The engine a
job was started on is kept in its record (`Engine.to_dict`, no secret in it), so
whoever follows the job later asks that engine, whatever their own environment.

`ssh://` goes through the user's own SSH setup: `~/.ssh/config` (HostName, Port,
User, IdentityFile, ProxyCommand), keys and the agent, `~/.ssh/known_hosts`
(unknown host keys are refused). `tcp://` uses TLS as the CLI does: with
`DOCKER_TLS_VERIFY` (certificates in `DOCKER_CERT_PATH`, default `~/.docker`),
with a context's TLS material, and on the TLS port 2376.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ...errors import InvalidOption

LOCAL_SOCKET = "unix:///var/run/docker.sock"
TLS_PORT = 2376
SCHEMES = ("unix", "npipe", "tcp", "ssh")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Engine:
    """A Docker engine: where it is, the name the user chose it by, and its TLS material."""

    url: str
    name: str = ""  # the docker_hosts or context name it was chosen by ("" when given as a URL)
    tls_dir: str | None = None  # ca.pem, cert.pem and key.pem there: TLS with a client certificate
    tls_verify: bool = True

    @property
    def remote(self) -> bool:
        """Whether the engine's machine is another one: it cannot see this machine's disk."""
        return urlsplit(self.url).scheme not in ("unix", "npipe")

    @property
    def label(self) -> str:
        """How the engine is named to the user: its name, else its host (no user, no port), else 'local'."""
        if self.name:
            return self.name
        if not self.remote:
            return "local"
        return urlsplit(self.url).hostname or self.url

    def to_dict(self) -> dict:
        """As a record keeps it: what is set (TLS's verification only with TLS)."""
        kept = {key: value for key, value in dataclasses.asdict(self).items() if value not in (None, "")}
        if self.tls_dir is None:
            kept.pop("tls_verify")
        return kept

    @classmethod
    def of(cls, value) -> "Engine | None":
        """The engine a record names (None when it names none, or names it badly)."""
        if not isinstance(value, dict) or not isinstance(value.get("url"), str):
            return None
        try:
            check_url(value["url"])
        except InvalidOption:
            return None
        name = value.get("name") if isinstance(value.get("name"), str) and HOST_NAME.fullmatch(value["name"]) else ""
        tls_dir = value.get("tls_dir") if isinstance(value.get("tls_dir"), str) else None
        return cls(value["url"], name, tls_dir, value.get("tls_verify") is not False)


# -- choosing one ----------------------------------------------------------------


def check_url(url: str, source: str = "--docker-host") -> str:
    """A Docker engine address as the CLI takes it: unix://, npipe://, tcp:// or ssh://, printable.
    `source`: where it was given, for the message (--docker-host, DOCKER_HOST, a docker_hosts name)."""
    shown = repr(url[:80] + ("…" if len(url) > 80 else ""))
    bad = InvalidOption(
        f"{source} {shown} is not a Docker engine's address",
        "give ssh://USER@HOST, tcp://HOST:2376, unix:///PATH, or a name from %config TrainerMagics.docker_hosts",
    )
    if not all(33 <= ord(c) <= 126 for c in url) or len(url) > 512:
        raise bad
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port  # a bad IPv6 literal or port raises here
    except ValueError:
        raise bad from None
    if parts.scheme not in SCHEMES:
        raise bad
    if parts.scheme in ("tcp", "ssh") and not host:
        raise InvalidOption(f"{source} {shown} names no host", f"for example {parts.scheme}://gpu1")
    if parts.scheme == "ssh" and (parts.password is not None or parts.path not in ("", "/")):
        raise InvalidOption(
            f"{source} ssh://{host}… holds a password or a path",
            "give ssh://USER@HOST[:PORT]; keys come from your SSH setup",
        )
    return url


def resolve(given: str | None, named: dict | None = None, environ=None) -> Engine:
    """The engine a job started now uses. `given`: --docker-host or its %config default; `named`:
    %config TrainerMagics.docker_hosts."""
    environ = os.environ if environ is None else environ
    named = named or {}
    if given:
        if "://" in given:
            return _with_tls(Engine(check_url(given)), environ)
        if not HOST_NAME.fullmatch(given):
            raise InvalidOption(
                f"--docker-host {given[:80]!r} is neither an address nor a host's name (letters, digits, _ . -)",
                "give ssh://USER@HOST, or a name from %config TrainerMagics.docker_hosts",
            )
        if given in named:
            url = named[given]
            if not isinstance(url, str) or "://" not in url:
                raise InvalidOption(
                    f"docker_hosts[{given!r}] is not a Docker engine's address",
                    "give ssh://USER@HOST or tcp://HOST:2376",
                )
            return _with_tls(Engine(check_url(url, f"docker_hosts[{given!r}]"), name=given), environ)
        context = _context(given, environ)
        if context is not None:
            return context
        names = sorted(name for name in named if isinstance(name, str) and HOST_NAME.fullmatch(name))
        known = ", ".join(names[:10]) + (", …" if len(names) > 10 else "") if names else "none configured"
        raise InvalidOption(
            f"--docker-host {given!r} is neither an address nor a known host (docker_hosts: {known}; "
            "no Docker context of that name)",
            'give ssh://USER@HOST, or name it: %config TrainerMagics.docker_hosts = {"gpu1": "ssh://me@gpu1"}',
        )
    if environ.get("DOCKER_HOST"):
        return _with_tls(Engine(check_url(environ["DOCKER_HOST"], "DOCKER_HOST")), environ)
    current = environ.get("DOCKER_CONTEXT") or _current_context(environ)
    if current and current != "default":
        context = _context(current, environ)
        if context is None:
            raise InvalidOption(
                f"the current Docker context {current!r} does not exist",
                "docker context use default, or unset DOCKER_CONTEXT",
            )
        return context
    return Engine(LOCAL_SOCKET)


def _with_tls(engine: Engine, environ) -> Engine:
    """A tcp:// engine's TLS, as the docker CLI takes it from the environment."""
    parts = urlsplit(engine.url)
    if parts.scheme != "tcp":
        return engine
    verify = environ.get("DOCKER_TLS_VERIFY", "") not in ("", "0")
    if not (verify or environ.get("DOCKER_TLS") or parts.port == TLS_PORT):
        return engine
    cert_dir = environ.get("DOCKER_CERT_PATH") or str(_config_dir(environ))
    return dataclasses.replace(engine, tls_dir=os.path.abspath(cert_dir), tls_verify=verify or parts.port == TLS_PORT)


def _config_dir(environ) -> Path:
    return Path(environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker"))


def _current_context(environ) -> str | None:
    try:
        with open(_config_dir(environ) / "config.json", encoding="utf-8") as handle:
            value = json.loads(handle.read(1 << 20)).get("currentContext")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _context(name: str, environ) -> Engine | None:
    """A Docker context's engine (`docker context create NAME --docker host=…`), None if there is none."""
    if not HOST_NAME.fullmatch(name):
        return None
    digest = hashlib.sha256(name.encode()).hexdigest()
    contexts = _config_dir(environ) / "contexts"
    try:
        with open(contexts / "meta" / digest / "meta.json", encoding="utf-8") as handle:
            endpoint = json.loads(handle.read(1 << 20))["Endpoints"]["docker"]
        url = check_url(endpoint["Host"], f"Docker context {name!r}")
    except (OSError, ValueError, KeyError, TypeError, RecursionError, InvalidOption):
        return None
    tls_dir = contexts / "tls" / digest / "docker"
    has_tls = (tls_dir / "cert.pem").is_file() and (tls_dir / "key.pem").is_file()
    return Engine(
        url, name=name, tls_dir=str(tls_dir) if has_tls else None, tls_verify=not endpoint.get("SkipTLSVerify")
    )
