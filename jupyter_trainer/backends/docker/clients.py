"""A client of a Docker engine (see hosts for which one), made with the care a remote
engine needs: a short timeout on every call, a bounded wait for the handshake, a rest after a
failure so that a host that is down costs the pollers nothing, and over SSH no more sessions at
once than the host's sshd allows (sessions.py); and the remote engines a store's jobs have used,
for prune."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from ...core.files import make_private_dir, write_private_file
from ...errors import TrainerError
from .errors import Doing, busy, engine_errors, refused, translate
from .hosts import Engine
from .sessions import HostSessions, Sessions, count_sessions

# A remote engine is asked with a short timeout: a laptop that lost its network must learn it in
# seconds, not in the minute a TCP connection takes to give up.
REMOTE_CALL_SECONDS = 15
LOCAL_CALL_SECONDS = 60
CONNECT_SECONDS = 10  # making a client of a remote engine (SSH's handshake and login included)
ENGINES_DIR = "engines"  # in the store's home: one file per remote engine its jobs have used
RETRY_AFTER_SECONDS = 20.0  # an engine that could not be reached is not asked again sooner (> CONNECT_SECONDS)
MINIMUM_API_VERSION = "1.41"  # device requests (--gpus) and cgroup namespaces: Docker 20.10
# Over SSH every connection to the engine is a session of one SSH connection, and sshd allows 10
# (MaxSessions): a client keeps at most this many idle, and opens no more than the host allows
# (sessions.py). Log streams have an SSH connection of their own (purpose "streams"), where
# STREAMS_PER_HOST of them leave room for the calls that start another.
REMOTE_POOL_SIZE = 3
STREAMS_PER_HOST = 4
SESSION_WAIT_SECONDS = 5.0  # a call waits this long for a session, at most, while the others are taken


def connect(engine: Engine, sessions: Sessions | None = None):
    """A new docker-py client of this engine. A remote engine that does not answer the SSH or
    TLS handshake within CONNECT_SECONDS is unreachable (docker-py itself would wait minutes).
    Over SSH its sessions are opened through `sessions` (a bound of their own by default).
    It raises what docker-py and paramiko raise: `Clients.calling` words it."""
    import docker

    kwargs = {
        "base_url": _with_configured_port(engine.url),
        "timeout": REMOTE_CALL_SECONDS if engine.remote else LOCAL_CALL_SECONDS,
    }
    if engine.remote:
        kwargs["max_pool_size"] = REMOTE_POOL_SIZE
    if engine.tls_dir is not None:
        kwargs["tls"] = docker.tls.TLSConfig(
            client_cert=(os.path.join(engine.tls_dir, "cert.pem"), os.path.join(engine.tls_dir, "key.pem")),
            ca_cert=os.path.join(engine.tls_dir, "ca.pem") if engine.tls_verify else None,
            verify=engine.tls_verify,
        )
    if not engine.remote:
        return docker.DockerClient(**kwargs)
    _quiet_paramiko()
    client = _within(
        CONNECT_SECONDS, lambda: _tls_client(kwargs) if engine.tls_dir else docker.DockerClient(**kwargs), engine
    )
    if urlsplit(engine.url).scheme == "ssh":
        count_sessions(client, sessions or Sessions(HostSessions(), SESSION_WAIT_SECONDS, REMOTE_CALL_SECONDS))
    return client


def _with_configured_port(url: str) -> str:
    """ssh://HOST with the Port that ~/.ssh/config gives HOST, as ssh would use it: docker-py reads
    the config's HostName, User, IdentityFile and ProxyCommand, but takes a URL without a port for
    port 22 before it looks."""
    parts = urlsplit(url)
    if parts.scheme != "ssh" or parts.port is not None:
        return url
    try:
        import paramiko

        config = paramiko.SSHConfig.from_path(os.path.expanduser("~/.ssh/config"))
        port = config.lookup(parts.hostname).get("port")
    except Exception:  # noqa: BLE001  no config, or one paramiko cannot read: docker-py reports it
        return url
    if not port or not str(port).isdigit():
        return url
    return f"ssh://{parts.netloc}:{port}"


def _tls_client(kwargs: dict):
    """A client of an engine with TLS material of its own. Requests lets REQUESTS_CA_BUNDLE and
    CURL_CA_BUNDLE (set on many company networks) replace the CA a session was given, and the engine's
    CA is then unknown: the client does not read the environment (as the docker CLI does not). Its API
    version is asked once that is so (docker-py asks while it is being made)."""
    import docker

    client = docker.DockerClient(**kwargs, version=MINIMUM_API_VERSION)
    client.api.trust_env = False
    try:
        client.api._version = client.api.version(api_version=False)["ApiVersion"]
    except BaseException:
        client.close()
        raise
    return client


def _quiet_paramiko() -> None:
    """Paramiko logs a traceback for every failed handshake (a host that is down, at each poll);
    the user gets one line from us instead. Its records stop at its own logger, unless the user
    gave that logger a handler of their own."""
    import logging

    logger = logging.getLogger("paramiko")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _within(seconds: float, make, engine: Engine):
    """make() on a thread of its own, awaited `seconds` at most: a handshake with a host whose packets
    are dropped would block for minutes. A late answer is closed when it comes."""
    outcome: dict = {}
    done = threading.Event()

    def attempt():
        try:
            outcome["client"] = make()
        except BaseException as exc:  # noqa: BLE001  handed to the caller
            outcome["error"] = exc
        if abandoned.is_set() and "client" in outcome:
            outcome["client"].close()
        done.set()

    abandoned = threading.Event()
    threading.Thread(target=attempt, name=f"connect {engine.label}", daemon=True).start()
    if not done.wait(seconds):
        abandoned.set()
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["client"]


class Reachability:
    """When each engine last failed, so that a host that is down is not asked at every poll."""

    def __init__(self):
        self._failed_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def failed(self, engine: Engine) -> None:
        with self._lock:
            self._failed_at[engine.url] = time.monotonic()

    def answered(self, engine: Engine) -> None:
        with self._lock:
            self._failed_at.pop(engine.url, None)

    def resting(self, engine: Engine) -> bool:
        """Whether it failed so recently that asking again would only fail again."""
        with self._lock:
            failed = self._failed_at.get(engine.url)
        return failed is not None and time.monotonic() - failed < RETRY_AFTER_SECONDS


class Clients:
    """The clients of every engine this process talks to, each made on first use, and the way
    every call to an engine is made: `with clients.calling(engine, doing) as client:`. Whatever
    docker-py or paramiko raises in there leaves as our error (errors.translate); a lost engine's
    clients are dropped (an SSH connection that died stays dead: the next call makes a new one).
    A remote engine that failed a moment ago is not asked again before RETRY_AFTER_SECONDS, so a
    host that is down costs every poll nothing; threads that need a client being made wait for
    that one handshake. Log streams have clients of their own (`purpose="streams"`): over SSH a
    connection of their own, whose sessions the calls of the views and pollers do not share, and
    where a stream is started at once or not at all (the log is then read through the engine).
    Over SSH every thread's calls (status checks, the poller's, a stream's start, a stop) share
    the host's sessions: a call waits for one, up to SESSION_WAIT_SECONDS (see sessions.py)."""

    def __init__(self):
        self._clients: dict[str, object] = {}  # by purpose and engine URL: each job names its engine
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}  # by the same key: one handshake at a time
        self._hosts: dict[str, HostSessions] = {}  # by engine URL: what its sshd allows
        self._reach = Reachability()

    def host_sessions(self, engine: Engine) -> HostSessions:
        """What the engine's host allows of this process's SSH connections, as learned so far."""
        with self._lock:
            return self._hosts.setdefault(engine.url, HostSessions())

    def streams_allowed(self, engine: Engine) -> int:
        """How many logs may be streamed from `engine` at once: each holds a session of the streams'
        connection, where one more is left for the calls that start a stream."""
        return max(0, min(STREAMS_PER_HOST, self.host_sessions(engine).limit - 1))

    @contextlib.contextmanager
    def calling(self, engine: Engine, doing: Doing, purpose: str = "calls"):
        try:
            yield self._client(engine, purpose)
        except TrainerError:
            raise
        except engine_errors() as exc:
            if not isinstance(exc, _Resting) and not refused(exc) and not busy(exc):
                self._lost(engine)
            raise translate(exc, engine, doing) from exc
        self._reach.answered(engine)

    def _client(self, engine: Engine, purpose: str):
        key = f"{purpose} {engine.url}"
        with self._lock:
            client = self._clients.get(key)
            making = self._making.setdefault(key, threading.Lock())
        if client is not None:
            return client
        with making:  # another thread making it: its outcome is this one's (a client, or a rest)
            with self._lock:
                client = self._clients.get(key)
            if client is not None:
                return client
            # a local engine is asked again at once: Docker may just have started
            if engine.remote and self._reach.resting(engine):
                raise _Resting()
            patience = 0.0 if purpose == "streams" else SESSION_WAIT_SECONDS
            try:
                client = connect(engine, Sessions(self.host_sessions(engine), patience, REMOTE_CALL_SECONDS))
            except engine_errors() as exc:
                if engine.remote and not refused(exc) and not busy(exc):
                    self._reach.failed(engine)  # before the next thread takes its turn
                raise
            with self._lock:
                self._clients[key] = client
            return client

    def _lost(self, engine: Engine) -> None:
        self._reach.failed(engine)
        with self._lock:
            clients = [self._clients.pop(key) for key in list(self._clients) if key.endswith(f" {engine.url}")]
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()


class _Resting(OSError):
    """The engine failed a moment ago and was not asked again."""

    def __str__(self) -> str:
        return "it did not answer a moment ago"


def check_answers(engine: Engine, doing: Doing) -> None:
    """One line now, when `engine` does not answer, rather than a failure in a job's log later."""
    with Clients().calling(engine, doing) as client:
        try:
            client.ping()
        finally:
            client.close()


def remember_engine(home: Path, engine: Engine) -> None:
    """Note a remote engine this store's jobs use, so that prune looks there too once no job names it."""
    path = home / ENGINES_DIR / f"{hashlib.sha256(engine.url.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        make_private_dir(path.parent)
        write_private_file(path, json.dumps(engine.to_dict()).encode())


def used_engines(home: Path) -> list[Engine]:
    engines = []
    try:
        names = sorted(os.listdir(home / ENGINES_DIR))
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            engine = Engine.of(json.loads((home / ENGINES_DIR / name).read_bytes()[:4096]))
            if engine is not None and engine.remote:
                engines.append(engine)
    return engines
