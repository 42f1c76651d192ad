"""What a `%%train_detached` cell asks for, parsed and checked.

Logic alone but for one look at which Docker engine is chosen (the environment
and the docker CLI's config, as the CLI reads them): turns option strings into a `DetachedSpec`, and a spec into the
non-secret options kept in the record plus a fingerprint that tells whether a
re-run cell is the same cell. Environment values and the --notify URL are
secrets: they reach the job's (or its supervisor's) process and nothing else;
the fingerprint covers them through an HMAC keyed by a private per-store key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Iterable, Mapping

from ..errors import InvalidOption
from .checks import Metric, parse_metrics, shown_url
from .options import DETACHED, DETACHED_BACKENDS, DetachedBackend, settle

__all__ = [
    "DetachedSpec", "Metric", "added_field", "build_spec", "cell_values", "detached_spec", "parse_declared", "public_options_of",
    "secret", "secrets_of", "spec_fingerprint",
]



def secret(added: bool = False, **options):
    """A spec field whose values are secrets: the stored options keep its keys only.
    `added`: a field added later, kept only when set (see `added_field`)."""
    return field(repr=False, metadata={"secret": True, "omit_default": added}, **options)


def added_field(default=MISSING, **options):
    """A field added after cells were fingerprinted: stored and fingerprinted only when it differs
    from its default, so the cells that do not use it keep their fingerprints (a re-run attaches)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("give a tuple, or a default_factory")
    return field(default=default, metadata={"omit_default": True}, **options)


def transient(default=None):
    """A spec field its backend checks before the launch, and nothing else: neither stored nor
    fingerprinted (a cell whose field it is stays the same cell)."""
    return field(default=default, compare=False, metadata={"transient": True})


def public_options_of(spec) -> dict:
    """A spec's options as stored and shown, derived from its fields: all but the script, the
    backend and transient fields; a secret field by its keys alone; a field added later only when
    it is not its default."""
    options = {}
    for spec_field in fields(spec):
        if spec_field.name in ("script", "backend") or spec_field.metadata.get("transient"):
            continue
        value = getattr(spec, spec_field.name)
        if _left_out(spec_field, value):
            continue
        if spec_field.metadata.get("secret") and isinstance(value, str):
            options[f"{spec_field.name}_to"] = shown_url(value)  # a URL: where it goes, not its token
        elif spec_field.metadata.get("secret"):
            options[f"{spec_field.name}_keys"] = sorted(value)
        else:
            options[spec_field.name] = _plain(value)
    return options


def secrets_of(spec) -> dict:
    """The secret values that make a cell what it is, by field name: for its fingerprint's HMAC
    only. A secret field added later counts only when set, as in `public_options_of`."""
    return {
        spec_field.name: getattr(spec, spec_field.name)
        for spec_field in fields(spec)
        if spec_field.metadata.get("secret") and not _left_out(spec_field, getattr(spec, spec_field.name))
    }


def spec_fingerprint(spec, key: bytes, rerun: bool = False) -> str:
    """Any spec's fingerprint: its script, backend, stored options and secret values. Same cell,
    same fingerprint; `rerun` counts: adding it trains once more, and running that cell again
    attaches to the new run."""
    return cell_fingerprint(key, spec.script, spec.backend, spec.public_options(), rerun, **secrets_of(spec))


def _left_out(spec_field, value) -> bool:
    """A field added later and left at its default: neither stored nor fingerprinted."""
    return bool(spec_field.metadata.get("omit_default")) and value == _default_of(spec_field)


def _default_of(spec_field):
    return spec_field.default_factory() if spec_field.default is MISSING else spec_field.default


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
    backend: str  # a detached backend's name (options.DETACHED_BACKENDS)
    workdir: str
    interpreter: tuple[str, ...] = ("python3",)
    image: str | None = None
    container: str | None = None
    gpus: str | None = None
    env: dict[str, str] = secret(default_factory=dict)
    stop_container_when_done: bool = False
    metrics: tuple[Metric, ...] = ()
    args: tuple[str, ...] = added_field(())  # the script's arguments (after `--`)
    notify: str | None = secret(added=True, default=None)  # the URL told when the job ends
    from_cell: bool = added_field(True)  # a cell's script (its line 1 is the magic's), or a file's
    engine: dict | None = added_field(None)  # the Docker engine (engines.Engine.to_dict); None: the local socket
    sync: str | None = added_field(None)  # a local directory copied to a remote host's workdir first
    restarts: int | None = added_field(None)  # --restarts N: how often its container may start it again
    # a backend's own options that no field above holds, by option name, as its declaration settled
    # them: a new backend's options reach it (stored, shown and fingerprinted) with no field here
    backend_options: dict[str, Any] = added_field(default_factory=dict)
    # the line forms: the file run in place (absolute, on this machine), and its text's SHA-256;
    # the text itself is `script`, as submitted
    script_path: str | None = added_field(None)
    script_sha256: str | None = added_field(None)
    # SCRIPT lies on the job's machine only (a remote host's --workdir): script_path is its path
    # there, and its backend reads its text into `script` before anything is fingerprinted
    script_on_host: bool = added_field(False)
    # a file of this machine whose SCRIPT also names one in a remote host's --workdir (its path
    # there), with no --sync that sends it: its backend refuses to guess which of the two is meant
    also_on_host: str | None = transient()


    def public_options(self) -> dict:
        """The options as stored and shown: environment keys, never values."""
        return public_options_of(self)

    def fingerprint(self, key: bytes, rerun: bool = False) -> str:
        return spec_fingerprint(self, key, rerun)


def cell_fingerprint(key: bytes, script: str, backend: str, options: dict, rerun: bool, **secret) -> str:
    """An HMAC of everything that makes a cell: keyed, so that it reveals nothing of the secrets in it."""
    canonical = json.dumps(
        {"script": script, "backend": backend, "options": options, "rerun": rerun, **secret}, sort_keys=True
    )
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def build_spec(
    script: str, *, args: Iterable[str] = (), metrics: Iterable[str] = (), hosts: Mapping[str, str] | None = None, **values: Any
) -> DetachedSpec:
    """A detached spec from option values (by option name; one not given takes its default): the
    backend is the one whose switch is on, else the default one; it must be given only options it
    takes, and one of those it cannot do without. `hosts`: the named Docker hosts (docker_hosts)."""
    values = cell_values(script, DETACHED, values)
    backend = chosen_backend(values)
    _refuse_options_not_taken(backend, values)
    if backend.needs_one_of and not any(values[dest] for dest in backend.needs_one_of):
        raise InvalidOption(*backend.missing)
    # the backend's own options, and what they mean together (its declaration says), are the
    # spec's fields; the switches that chose it are not
    switches = {declared.switch for declared in DETACHED_BACKENDS if declared.switch}
    taken = {option.dest for option in DETACHED if option.taken_by(backend.name)} - switches
    # only the chosen backend's options are checked: another backend's check (in its own package)
    # is not even imported
    parsed = backend.spec_fields(parse_declared(DETACHED, {dest: value for dest, value in values.items() if dest in taken}), hosts)
    held = {spec_field.name for spec_field in fields(DetachedSpec)} - {"backend_options"}
    # never dropped; one not given is left out, so that cells without it keep their fingerprints
    own = {dest: value for dest, value in parsed.items() if dest not in held and not _not_given(value)}
    core = {dest: value for dest, value in parsed.items() if dest in held}
    return DetachedSpec(script=script, backend=backend.name, metrics=parse_metrics(metrics), args=tuple(args), backend_options=own, **core)


def _not_given(value: Any) -> bool:
    """An option's value when neither a flag nor config gave one (0 is a value: `is`, not ==)."""
    return value is None or value is False or (isinstance(value, (list, tuple)) and not value)


def cell_values(script: str, options, values: Mapping[str, Any], needs_script: bool = True) -> dict[str, Any]:
    """What a spec builder starts from: a cell with a script in it (unless not `needs_script`), and
    every option's value (its default where none is given); an option no declaration names is a
    programming error."""
    if needs_script and not script.strip():
        raise InvalidOption("the cell is empty", "write the training script in the cell body")
    unknown = set(values) - {option.dest for option in options}
    if unknown:
        raise TypeError(f"unexpected options {sorted(unknown)}")
    return settle(options, values, {})


def parse_declared(options, values: Mapping[str, Any]) -> dict[str, Any]:
    """Every value checked by the parser its option declares (`Option.parse`), the rest as they are."""
    declared = {option.dest: option for option in options}
    return {dest: declared[dest].check(value) if dest in declared else value for dest, value in values.items()}


def chosen_backend(values: Mapping[str, Any]) -> DetachedBackend:
    """The backend whose switch is on, else the one that needs no switch."""
    switched = [backend for backend in DETACHED_BACKENDS if backend.switch and values.get(backend.switch)]
    if len(switched) > 1:
        raise InvalidOption(f"{' and '.join(_flag(backend.switch) for backend in switched)} cannot be given together", "choose one")
    return switched[0] if switched else next(backend for backend in DETACHED_BACKENDS if backend.switch is None)


def _refuse_options_not_taken(backend: DetachedBackend, values: Mapping[str, Any]) -> None:
    others = [option for option in DETACHED if not option.taken_by(backend.name)]
    given = [option for option in others if not _not_given(values.get(option.dest))]  # 0 is a value
    if not given:
        return
    explained = next((option for option in given if option.elsewhere), None)
    if explained is not None:
        raise InvalidOption(f"{explained.flag} {explained.elsewhere}", f"drop {explained.flag}{_instead(backend)}")
    # options only backends chosen by a switch take (--toy-nice): say which switch they need; this
    # is also how the default backend, which lacks nothing, refuses them
    owners = {
        declared.switch for option in given for declared in DETACHED_BACKENDS
        if declared.switch and option.taken_by(declared.name) and option.backends
    }  # fmt: skip
    default = next(declared for declared in DETACHED_BACKENDS if declared.switch is None)
    if backend.switch is None or not any(option.taken_by(default.name) for option in given):
        flags = _listed([option.flag for option in given])
        switches = sorted(_flag(switch) for switch in owners)
        raise InvalidOption(
            f"{flags} {'is an option' if len(given) == 1 else 'are options'} of {' or '.join(switches)}",
            f"add {' or '.join(switches)}, or drop {flags}",
        )
    # what it lacks is what the default backend has: another switched backend's options are not listed
    lacked = [option.flag for option in others if option.taken_by(default.name)]
    raise InvalidOption(f"{_flag(backend.switch)} {backend.lacks}", f"drop {_listed(lacked)}")


def _instead(backend: DetachedBackend) -> str:
    """What the backend offers instead of an option it does not take, where it says (Slurm's --requeue)."""
    return f", or use {backend.instead}" if backend.instead else ""


def _listed(flags: list[str]) -> str:
    return ", ".join(flags[:-1]) + " and " + flags[-1] if len(flags) > 1 else flags[0]


def _flag(dest: str | None) -> str:
    return next(option.flag for option in DETACHED if option.dest == dest)


def detached_spec(
    script: str, given: Mapping[str, Any], config: Mapping[str, Any], args: Iterable[str] = (), hosts: Mapping[str, str] | None = None
) -> DetachedSpec:
    """A `%%train_detached` cell, or `jupyter-trainer submit`: its flags (`given`, by option name,
    None where not given) and the configured defaults. A flag always wins over config: a flagged
    option of another backend (--image) overrides a configured switch (--host), as a flagged
    switch overrides the configured options of the backends it does not choose."""
    metrics = given.get("metrics") or ()
    given = {option.dest: given.get(option.dest) for option in DETACHED}
    backend = _chosen_with_config(given, config)
    switches = {other.switch: other is backend for other in DETACHED_BACKENDS if other.switch}
    taken = {option.dest for option in DETACHED if option.taken_by(backend.name)} - set(switches)
    values = settle(DETACHED, {**given, **switches}, {dest: value for dest, value in config.items() if dest in taken})
    return build_spec(script, **values, metrics=metrics, args=args, hosts=hosts)


def _chosen_with_config(given: Mapping[str, Any], config: Mapping[str, Any]) -> DetachedBackend:
    """A switch flagged on chooses; else a configured switch (not flagged off), unless an option
    another backend cannot do without (--image, --container) is flagged; else the default backend."""
    if any(given.get(backend.switch) for backend in DETACHED_BACKENDS if backend.switch):
        return chosen_backend(given)
    needed_elsewhere = {dest for backend in DETACHED_BACKENDS for dest in backend.needs_one_of}
    for backend in DETACHED_BACKENDS:
        if backend.switch and given.get(backend.switch) is None and config.get(backend.switch):
            overriding = [
                option for option in DETACHED
                if option.dest in needed_elsewhere and not option.taken_by(backend.name) and given.get(option.dest) is not None
            ]  # fmt: skip
            if not overriding:
                return backend
    return chosen_backend({})
