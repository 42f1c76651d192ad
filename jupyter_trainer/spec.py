"""What a `%%train_detached` cell asks for, parsed and checked.

Pure logic: turns option strings into a `DetachedSpec`, and a spec into the
non-secret options kept in the record plus a fingerprint that tells whether a
re-run cell is the same cell. Environment values are secrets: they reach the
job's process and nothing else; the fingerprint covers them through an HMAC
keyed by a private per-store key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shlex
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

import regex as _regex

from .errors import InvalidOption
from .jobs import validate_name
from .options import DETACHED, settle

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
GPU_IDS = re.compile(r"\d+(,\d+)*")
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,127}")
IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")


@dataclass(frozen=True)
class Metric:
    name: str
    regex: str

    def compile(self) -> re.Pattern[str]:
        return re.compile(self.regex)


def secret(**options):
    """A spec field whose values are secrets: the stored options keep its keys only."""
    return field(repr=False, metadata={"secret": True}, **options)


def public_options_of(spec) -> dict:
    """A spec's options as stored and shown, derived from its fields: all but the script and the
    backend; a secret field by its keys alone; a field marked `omit_empty` only when set (so that
    adding one keeps the fingerprints of the cells that do not use it)."""
    options = {}
    for spec_field in fields(spec):
        if spec_field.name in ("script", "backend"):
            continue
        value = getattr(spec, spec_field.name)
        if spec_field.metadata.get("secret"):
            options[f"{spec_field.name}_keys"] = sorted(value)
        elif not (spec_field.metadata.get("omit_empty") and not value):
            options[spec_field.name] = _plain(value)
    return options


def _plain(value):
    """A value as JSON keeps it: tuples as lists, a metric as [name, regex]."""
    if isinstance(value, Metric):
        return [value.name, value.regex]
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class DetachedSpec:
    script: str
    backend: str  # "docker" or "host"
    workdir: str
    interpreter: tuple[str, ...] = ("python3",)
    image: str | None = None
    container: str | None = None
    gpus: str | None = None
    env: dict[str, str] = secret(default_factory=dict)
    stop_container_when_done: bool = False
    metrics: tuple[Metric, ...] = ()
    args: tuple[str, ...] = field(default=(), metadata={"omit_empty": True})  # the script's arguments (after `--`)

    def public_options(self) -> dict:
        """The options as stored and shown: environment keys, never values."""
        return public_options_of(self)

    def fingerprint(self, key: bytes, rerun: bool = False) -> str:
        """Same cell, same fingerprint. `rerun` counts: adding it trains once more, and
        running that cell again attaches to the new run."""
        return cell_fingerprint(key, self.script, self.backend, self.public_options(), rerun, env=self.env)


def cell_fingerprint(key: bytes, script: str, backend: str, options: dict, rerun: bool, **secret) -> str:
    """An HMAC of everything that makes a cell: keyed, so that it reveals nothing of the secrets in it."""
    canonical = json.dumps(
        {"script": script, "backend": backend, "options": options, "rerun": rerun, **secret}, sort_keys=True
    )
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def parse_env(items: Iterable[str]) -> dict[str, str]:
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


def parse_interpreter(command: str | None) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(command or ""))
    except ValueError as exc:
        raise InvalidOption(f"--interpreter {command!r} cannot be split into words ({exc})") from None
    if not words:
        raise InvalidOption("--interpreter is empty", "give a command such as python3")
    return words


def parse_metrics(items: Iterable[str]) -> tuple[Metric, ...]:
    metrics = []
    for item in items or ():
        name, sep, regex = item.partition("=")
        if not sep or not METRIC_NAME.fullmatch(name):
            raise InvalidOption(f"--metric expects NAME=REGEX, got {item[:60]!r}", r"for example --metric 'loss=loss: ([0-9.]+)'")
        try:
            groups = re.compile(regex).groups
            _regex.compile(regex, _regex.VERSION0)  # what the log is matched with
        except (re.error, _regex.error) as exc:
            raise InvalidOption(f"--metric {name}: bad regular expression ({exc})") from None
        if groups != 1:
            raise InvalidOption(f"--metric {name}: the regular expression needs exactly one capture group, it has {groups}")
        metrics.append(Metric(name, regex))
    return tuple(metrics)


def parse_image(image: str | None) -> str | None:
    if image is None:
        return None
    if not IMAGE_REF.fullmatch(image) or len(image) > 255:
        raise InvalidOption(f"invalid image reference {image[:60]!r}", "for example python:3.11-slim")
    return image


def parse_workdir(workdir: str | None) -> str:
    path = os.path.abspath(os.path.expanduser(workdir or os.getcwd()))
    if not os.path.isdir(path):
        raise InvalidOption(f"--workdir {path!r} is not a directory")
    return path


def build_spec(
    script: str,
    *,
    host: bool,
    image: str | None,
    container: str | None,
    workdir: str | None,
    gpus: str | None,
    env: Iterable[str] = (),
    interpreter: str | None = "python3",
    stop_container_when_done: bool = False,
    metrics: Iterable[str] = (),
    args: Iterable[str] = (),
) -> DetachedSpec:
    if not script.strip():
        raise InvalidOption("the cell is empty", "write the training script in the cell body")
    if host and (image or container or gpus or stop_container_when_done):
        raise InvalidOption("--host runs without a container", "drop --image, --container, --gpus and --stop-container-when-done")
    if not host and not image and not container:
        raise InvalidOption("no image or container given", "pass --image IMAGE (or set %config TrainerMagics.image), --container NAME, or --host")
    if container is not None:
        validate_name(container, "container name")
    return DetachedSpec(
        script=script,
        backend="host" if host else "docker",
        workdir=parse_workdir(workdir),
        interpreter=parse_interpreter(interpreter),
        image=parse_image(image),
        container=container,
        gpus=parse_gpus(gpus),
        env=parse_env(env),
        stop_container_when_done=stop_container_when_done,
        metrics=parse_metrics(metrics),
        args=tuple(args),
    )


# Configured defaults that still apply to a --host job (the others are the container's).
HOST_CONFIG = ("workdir", "interpreter")


def detached_spec(script: str, given: Mapping[str, Any], config: Mapping[str, Any], args: Iterable[str] = ()) -> DetachedSpec:
    """A `%%train_detached` cell, or `jupyter-trainer submit`: its flags (`given`, by option name,
    None where not given) and the configured defaults. A flag always wins over config: an explicit
    --image or --container overrides a configured --host, as an explicit --host overrides the
    configured container defaults."""
    host = given.get("host")
    if host is None:
        host = bool(config.get("host")) and given.get("image") is None and given.get("container") is None
    if host:
        config = {key: value for key, value in config.items() if key in HOST_CONFIG}
    values = settle(DETACHED, {**given, "host": host}, config)  # named as build_spec's arguments
    return build_spec(script, **values, metrics=given.get("metrics") or (), args=args)
