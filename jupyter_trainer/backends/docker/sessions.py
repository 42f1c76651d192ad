"""The SSH sessions this process opens to a remote engine, kept within what the host's sshd allows.

Over ssh:// every HTTP connection docker-py makes is a session of one SSH connection (an exec of
`docker system dial-stdio` there), and sshd allows MaxSessions of them at once (10 by default): one
more is refused ("no more sessions", paramiko's ChannelException). Left to itself docker-py keeps a
pool of idle connections per URL (up to nine pools, each an idle session or more) and opens a new
one whenever the pool it needs is empty, however many are open: a few threads asking one host (the
status checks, the poller's log reads, a stream being started) ran out. So a client made here:

* keeps one pool of idle connections (its max_pool_size at most), whatever the request's URL, and
  does not hand out one whose session the host has closed;
* opens a session only while the connection's count is under the host's limit (at first
  SESSIONS_PER_CONNECTION): the sessions open (a call's, an idle one, a followed log's stream, an
  exec's output being read), and for a moment those just closed (sshd lets a session go once our
  close has reached it and its command has ended);
* past the limit, closes an idle session for the new one, else waits, first come first served, up
  to its `patience`;
* a session refused all the same (the host allows fewer) lowers the host's limit to what was
  counted then (never below what it once let be open at once), and is asked for again a moment
  later;
* one not had within its patience raises ChannelException, which errors.busy words ("no SSH
  session to spare").
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time

# sshd allows 10 by default: room for sessions it has not let go yet (a busy host is slow to)
SESSIONS_PER_CONNECTION = 6
LINGER_SECONDS = 0.1  # a session just closed still counts this long, or twice a round trip if longer
PAUSE_SECONDS = 0.02  # between two looks while waiting for a session
REFUSED_PAUSE_SECONDS = 0.1  # after a refusal: a session closed a moment ago may still be there
POOL_URL = "http+docker://ssh"  # the one pool's key: docker-py keys its pools by each request's URL


class HostSessions:
    """How many sessions one remote host's sshd takes on a connection, as far as we know:
    shared by this process's connections to it."""

    def __init__(self, limit: int = SESSIONS_PER_CONNECTION):
        self.limit = limit
        self.refusals = 0  # sessions the host refused
        self.most_open = 0  # the most sessions it has let one connection have open at once
        self._lock = threading.Lock()

    def opened(self, open_now: int) -> None:
        with self._lock:
            self.most_open = max(self.most_open, open_now)

    def refused(self, counted: int) -> None:
        """The host refused a session while `counted` others were open on that connection, or
        closed a moment ago: it allows no more than those, and at least as many as it once let
        be open at once (sessions closed may still be there when it refuses: it takes a moment
        to let them go)."""
        with self._lock:
            self.limit = max(1, min(self.limit, max(counted, self.most_open)))
            self.refusals += 1


class Sessions:
    """The sessions of one SSH connection, opened through `open` (see the module's doc)."""

    def __init__(self, host: HostSessions, patience: float, open_seconds: float):
        self.host = host
        self.patience = patience  # seconds a new session is waited for, at most, while others take the host's
        self.open_seconds = open_seconds  # seconds the host is given to answer for one (a silent network)
        self._lock = threading.Lock()
        # paramiko keeps one failure for the whole transport: of two sessions refused at once, one
        # would be told "Unable to open channel" (as if the connection were lost), not refused
        self._one_at_a_time = threading.Lock()
        self._channels: list[list] = []  # [channel, when it was seen closed (None while open)]
        self._opening = 0
        self._waiting: collections.deque = collections.deque()  # those waiting, first come first served
        self._round_trip = 0.0  # how long opening a session takes (smoothed): about the host's round trip
        self._pool = None  # the client's one pool, whose idle connections may be closed for a new one

    def open(self, open_session):
        """A new session, by `open_session()` (paramiko's Transport.open_session), once the count allows it."""
        import paramiko

        deadline = time.monotonic() + self.patience
        turn = object()
        with self._lock:
            self._waiting.append(turn)
        try:
            while True:
                live, counted = self._reserve(turn)
                if live is None:
                    asked_at = time.monotonic()
                    try:
                        with self._one_at_a_time:
                            channel = open_session()
                    except paramiko.ChannelException:
                        self._refused(turn)
                        pause = REFUSED_PAUSE_SECONDS
                    except BaseException:  # the connection failed: the caller says so
                        with self._lock:
                            self._opening -= 1
                        raise
                    else:
                        self._opened(channel, time.monotonic() - asked_at)
                        return channel
                else:
                    if live >= self.host.limit:  # open ones fill the count: an idle one makes room
                        self._close_an_idle_one()
                    pause = PAUSE_SECONDS
                left = deadline - time.monotonic()
                if left <= 0:
                    raise paramiko.ChannelException(
                        1, f"no SSH session to spare within {self.patience:g} s ({counted} open)"
                    )
                time.sleep(min(pause, left))
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiting.remove(turn)

    def _reserve(self, turn) -> tuple[int | None, int]:
        """(None, count) with a session reserved for `turn` when it is the first waiting and there
        is room; else (sessions open and being opened, count)."""
        with self._lock:
            live, counted = self._count(time.monotonic())
            if counted < self.host.limit and self._waiting[0] is turn:
                self._opening += 1
                self._waiting.popleft()  # the next one may open one too, meanwhile
                return None, counted
            return live, counted

    def _opened(self, channel, seconds: float) -> None:
        with self._lock:
            self._opening -= 1
            self._channels.append([channel, None])
            self._round_trip = seconds if not self._round_trip else 0.8 * self._round_trip + 0.2 * seconds
            open_now = sum(not entry[0].closed for entry in self._channels)
        self.host.opened(open_now)

    def _refused(self, turn) -> None:
        with self._lock:
            self._opening -= 1
            self._waiting.appendleft(turn)  # first again, once there is room
            counted = self._count(time.monotonic())[1]
        self.host.refused(counted)

    def _linger(self) -> float:
        """How long a session closed here still counts: sshd lets it go once our close reaches it
        (half a round trip) and its command has ended."""
        return max(LINGER_SECONDS, 2 * self._round_trip)

    def _count(self, now: float) -> tuple[int, int]:  # under the lock
        linger = self._linger()
        kept = []
        for entry in self._channels:
            channel, closed_at = entry
            if closed_at is None and channel.closed:  # closed by us, or by the host
                entry[1] = closed_at = now
            if closed_at is None or now - closed_at < linger:
                kept.append(entry)
        self._channels = kept
        live = sum(closed_at is None for _, closed_at in kept) + self._opening
        return live, len(kept) + self._opening

    def _close_an_idle_one(self) -> None:
        """Close one of the pool's idle connections (its session goes with it), if it has one."""
        idle = getattr(self._pool, "pool", None)  # urllib3's queue: idle connections, None for free places
        if idle is None:
            return
        try:
            connection = idle.get_nowait()
        except queue.Empty:
            return
        try:
            if connection is not None:
                connection.close()
        finally:
            with contextlib.suppress(queue.Full):
                idle.put_nowait(None)  # its place in the pool, free


class _CountedTransport:
    """What a pool's connections open their sessions through: paramiko's transport, counted."""

    def __init__(self, transport, sessions: Sessions):
        self._transport = transport
        self._sessions = sessions

    def open_session(self, *args, **kwargs):
        kwargs.setdefault("timeout", self._sessions.open_seconds)  # paramiko's own: an hour
        return self._sessions.open(lambda: self._transport.open_session(*args, **kwargs))


def count_sessions(client, sessions: Sessions):
    """Make docker-py's `client` of an ssh:// engine (paramiko) open its sessions through
    `sessions`, from one pool. The sessions it opened while it was made are closed."""
    adapter = client.api.get_adapter(POOL_URL)
    if getattr(adapter, "ssh_client", None) is None:  # the ssh program's transport: a process per connection
        return client
    own_pool = adapter.get_connection

    def get_connection(url, proxies=None):
        pool = own_pool(POOL_URL, proxies)
        if not isinstance(pool.ssh_transport, _CountedTransport):
            pool.ssh_transport = _CountedTransport(pool.ssh_transport, sessions)
            pool._get_conn = _live_connections(pool._get_conn)
            sessions._pool = pool
        return pool

    adapter.get_connection = get_connection
    adapter.pools.clear()  # closes the pool made for the version asked while the client was made
    return client


def _live_connections(take):
    """docker-py's pool hands out an idle connection without looking whether it is still up (urllib3
    would): one whose session the host closed (its engine restarted, say) is closed here, and its
    request opens a new session."""

    def get_connection(timeout=None):
        connection = take(timeout)
        if getattr(connection.sock, "closed", False):
            connection.close()
        return connection

    return get_connection
