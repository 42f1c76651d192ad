"""What each option's value must be: one value parsed and checked at a time.

Each function takes what a flag or %config gave (None when neither did) and
returns the value a spec holds, or raises `InvalidOption` with one line saying
what to give instead. Pure logic: the declarations in `options` name them.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Iterable

from ..core.record import validate_name
from ..errors import InvalidOption

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
GPU_IDS = re.compile(r"\d+(,\d+)*")
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")  # as core/lines.py's
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,127}")
IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


@dataclass(frozen=True)
class Metric:
    name: str
    regex: str

    def compile(self) -> re.Pattern[str]:
        return re.compile(self.regex)


def parse_env(items: Iterable[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not ENV_KEY.fullmatch(key):
            # without '=' the item holds no value to leak; with one, show the key only
            raise InvalidOption(f"--env expects KEY=VALUE, got {key[:40]!r}", "for example --env SEED=1")
        env[key] = value
    return env


def parse_gpus(spec: str | None) -> str | None:
    if spec is None:
        return None
    text = spec.strip()
    if text == "all" or GPU_IDS.fullmatch(text):
        return text
    raise InvalidOption(f"--gpus expects 'all', a count or device ids like 0,1; got {spec!r}")


def parse_queue(name: str | None) -> str | None:
    if name is None or name == "":
        return None
    if not QUEUE_NAME.fullmatch(name):
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise InvalidOption(
            f"invalid --queue {shown!r}",
            "use 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )
    return name


def parse_interpreter(command: str | None) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(command or ""))
    except ValueError as exc:
        raise InvalidOption(f"--interpreter {command!r} cannot be split into words ({exc})") from None
    if not words:
        raise InvalidOption("--interpreter is empty", "give a command such as python3")
    if words[0].startswith("-"):  # the supervisor's nohup and setsid would read it as their own option
        raise InvalidOption(
            f"--interpreter {command!r} starts with an option, not a command",
            "give the command first: --interpreter 'python3 -X dev'",
        )
    return words


def parse_metrics(items: Iterable[str] | None) -> tuple[Metric, ...]:
    metrics = []
    for item in items or ():
        name, sep, regex = item.partition("=")
        if not sep or not METRIC_NAME.fullmatch(name):
            raise InvalidOption(
                f"--metric expects NAME=REGEX, got {item[:60]!r}",
                r"for example --metric 'loss=loss: ([0-9.]+)'",
            )
        import regex as _regex  # here, not at load: the extension loads without it

        try:
            groups = re.compile(regex).groups
            _regex.compile(regex, _regex.VERSION0)  # what the log is matched with
        except (re.error, _regex.error) as exc:
            raise InvalidOption(f"--metric {name}: bad regular expression ({exc})") from None
        if groups != 1:
            raise InvalidOption(
                f"--metric {name}: the regular expression needs exactly one capture group, it has {groups}"
            )
        metrics.append(Metric(name, regex))
    return tuple(metrics)


def parse_image(image: str | None) -> str | None:
    if image is None:
        return None
    if not IMAGE_REF.fullmatch(image) or len(image) > 255:
        raise InvalidOption(f"invalid image reference {image[:60]!r}", "for example python:3.11-slim")
    return image


def parse_container(name: str | None) -> str | None:
    if name is not None:
        validate_name(name, "container name")
    return name


def parse_workdir(workdir: str | None) -> str:
    path = os.path.abspath(os.path.expanduser(workdir or os.getcwd()))
    if not os.path.isdir(path):
        raise InvalidOption(f"--workdir {path!r} is not a directory")
    return path


def parse_remote_workdir(workdir: str | None) -> str:
    """A directory on a remote Docker host ("" when none is given: the container's own volume).
    It is that machine's path, so nothing here can check it exists; it must be absolute and plain."""
    if not workdir:
        return ""
    import posixpath

    plain = "/" + posixpath.normpath(workdir).lstrip("/")  # /. and //x are / and /x
    if (
        not workdir.startswith("/")
        or plain == "/"
        or ".." in workdir.split("/")
        or not all(32 <= ord(c) <= 126 for c in workdir)
        or len(workdir) > 1024
    ):
        raise InvalidOption(
            f"--workdir {workdir[:80]!r} is not an absolute directory of the remote host (nor its root)",
            "give a path such as /data/me/project (on the host), or leave it out to use a volume there",
        )
    return plain


def parse_sync(directory: str | None) -> str | None:
    """A local directory to copy up to a remote host's workdir before the job starts."""
    if not directory:
        return None
    path = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(path):
        raise InvalidOption(f"--sync {path!r} is not a directory", "name a local directory to copy up")
    home = os.path.realpath(os.path.expanduser("~"))
    real = os.path.realpath(path)
    if real == home or home.startswith(real.rstrip("/") + "/"):
        what = "is your home directory" if real == home else "holds your home directory"
        raise InvalidOption(
            f"--sync {path} {what}, with your credentials and tokens: nothing was copied",
            "sync the project's own directory (--sync ~/project), and list in its .trainerignore what else to "
            "leave out",
        )
    from .credentials import credential_holding

    secret = credential_holding(path)
    if secret is not None:
        raise InvalidOption(
            f"--sync {path} is, or lies in, ~/{secret}, where credentials are kept: nothing was copied",
            "sync the project's own directory instead",
        )
    return path


def parse_notify(url: str | None) -> str | None:
    """A URL to POST to when the job ends: http or https, a host, printable ASCII only (percent-encode
    the rest), no user name or password in it. A bad one is shown by its scheme and host alone (a
    webhook's path is often its secret)."""
    if url is None or url == "":
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        parts, host = None, None
    printable = all(33 <= ord(c) <= 126 for c in url) and "\\" not in url
    plain_host = host and re.fullmatch(r"[A-Za-z0-9.:\[\]_-]+", host)
    shown = f"{parts.scheme}://{host}/…" if parts and parts.scheme and plain_host else "that value"
    if parts is None or parts.scheme not in ("http", "https") or not host or not printable or len(url) > 2048:
        raise InvalidOption(
            f"--notify expects an http:// or https:// URL of printable ASCII, got {shown}",
            "for example --notify https://hooks.slack.com/services/...",
        )
    if "@" in parts.netloc:
        raise InvalidOption(
            f"--notify: {shown} has a user name or password in it, which cannot be sent",
            "put the secret in the URL's path or query, as webhooks do",
        )
    return url


def shown_url(url: str) -> str:
    """A URL as the store keeps and shows it: its scheme and host, never its path or query."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}/…"
