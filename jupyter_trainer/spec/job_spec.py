"""What a `%%train_detached` cell asks for, parsed and checked.

Logic alone but for what a backend's declared settle looks at (Docker's: which engine is chosen,
from the environment and the docker CLI's config): turns option values into a `DetachedSpec`, by
what the backends declare (a registry's `Backends.detached`, passed in), and a spec into the
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
from .options import BackendOptions, DetachedBackend, DetachedOptions, not_given, settle

__all__ = [
    "BackendOptions",
    "DetachedSpec",
    "Metric",
    "added_field",
    "build_spec",
    "cell_values",
    "detached_spec",
    "parse_declared",
    "public_options_of",
    "secret",
    "secrets_of",
    "spec_fingerprint",
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
        if isinstance(value, BackendOptions):
            options.update({name: _plain(item) for name, item in value.stored().items()})
            continue
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


# Docker's options were once fields of every spec, and so are in every stored cell's options: a cell
# of a backend without them keeps its fingerprint with them as they were (its `options` stores the
# rest: `BackendOptions.stored`)
FORMER_FIELDS = {"image": None, "container": None, "stop_container_when_done": False}


@dataclass(frozen=True)
class DetachedSpec:
    script: str
    backend: str  # a detached backend's name (its declaration's)
    workdir: str
    interpreter: tuple[str, ...] = ("python3",)
    gpus: str | None = None  # taken by the backends that declare options.GPUS
    env: dict[str, str] = secret(default_factory=dict)
    metrics: tuple[Metric, ...] = ()
    args: tuple[str, ...] = added_field(())  # the script's arguments (after `--`)
    notify: str | None = secret(added=True, default=None)  # the URL told when the job ends
    from_cell: bool = added_field(True)  # a cell's script (its line 1 is the magic's), or a file's
    # the backend's own options, typed (its declaration's `typed`: DockerOptions, SlurmOptions), as
    # its declaration settled them: a new backend's options reach it (stored, shown and
    # fingerprinted, by `BackendOptions.stored`) with no field here
    options: BackendOptions = field(default_factory=BackendOptions)
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
    queue: str | None = added_field(None)  # --queue NAME: a line of the job's machine (backends/turns.py)
    gpu_pool: str | None = transient()  # %config TrainerMagics.gpu_pool: the GPUs --gpus N hands out
    # a sweep's run (jobs/sweeps.py): its values, its sweep, and how many of the sweep's line run at once
    params: tuple[tuple[str, str], ...] = added_field(())
    sweep: str | None = added_field(None)
    max_running: int | None = added_field(None)

    def public_options(self) -> dict:
        """The options as stored and shown: environment keys, never values."""
        return {**FORMER_FIELDS, **public_options_of(self)}

    def fingerprint(self, key: bytes, rerun: bool = False) -> str:
        return spec_fingerprint(self, key, rerun)


def cell_fingerprint(key: bytes, script: str, backend: str, options: dict, rerun: bool, **secret) -> str:
    """An HMAC of everything that makes a cell: keyed, so that it reveals nothing of the secrets in it."""
    canonical = json.dumps(
        {"script": script, "backend": backend, "options": options, "rerun": rerun, **secret}, sort_keys=True
    )
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def build_spec(
    declared: DetachedOptions,
    script: str,
    *,
    args: Iterable[str] = (),
    metrics: Iterable[str] = (),
    hosts: Mapping[str, str] | None = None,
    **values: Any,
) -> DetachedSpec:
    """A detached spec from option values (by option name; one not given takes its default), by
    what the backends declared (`declared`: a registry's `Backends.detached`): the backend is the one
    whose switch is on, else the default one; it must be given only options it takes, and one of
    those it cannot do without. `hosts`: the named Docker hosts (docker_hosts)."""
    values = cell_values(script, declared.options, values)
    backend = chosen_backend(declared, values)
    _refuse_options_not_taken(declared, backend, values)
    if backend.needs_one_of and not any(values[dest] for dest in backend.needs_one_of):
        raise InvalidOption(*backend.missing)
    # the backend's own options, and what they mean together (its declaration says), are the
    # spec's fields; the switches that chose it are not
    taken = {option.dest for option in declared.options if declared.taken_by(option, backend)} - declared.switches
    # only the chosen backend's options are checked: another backend's check (in its own package)
    # is not even imported
    parsed = backend.spec_fields(
        parse_declared(declared.options, {dest: value for dest, value in values.items() if dest in taken}), hosts
    )
    held = {spec_field.name for spec_field in fields(DetachedSpec)} - {"options"}
    core = {dest: value for dest, value in parsed.items() if dest in held}
    own = backend.typed(**{dest: value for dest, value in parsed.items() if dest not in held})
    return DetachedSpec(
        script=script, backend=backend.name, metrics=parse_metrics(metrics), args=tuple(args), options=own, **core
    )


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


def chosen_backend(declared: DetachedOptions, values: Mapping[str, Any]) -> DetachedBackend:
    """The backend whose switch is on, else the one that needs no switch."""
    switched = [backend for backend in declared.backends if backend.switch and values.get(backend.switch)]
    if len(switched) > 1:
        raise InvalidOption(
            f"{' and '.join(_flag(declared, backend.switch) for backend in switched)} cannot be given together",
            "choose one",
        )
    return switched[0] if switched else declared.default


def _refuse_options_not_taken(declared: DetachedOptions, backend: DetachedBackend, values: Mapping[str, Any]) -> None:
    others = [option for option in declared.options if not declared.taken_by(option, backend)]
    given = [option for option in others if not not_given(values.get(option.dest))]  # 0 is a value
    if not given:
        return
    explained = next((option for option in given if option.elsewhere), None)
    if explained is not None:
        raise InvalidOption(f"{explained.flag} {explained.elsewhere}", f"drop {explained.flag}{_instead(backend)}")
    # options only backends chosen by a switch take (--toy-nice): say which switch they need; this
    # is also how the default backend, which lacks nothing, refuses them
    owners = {
        other.switch for option in given for other in declared.backends
        if other.switch and declared.taken_by(option, other) and not declared.taken_by_every_one(option)
    }  # fmt: skip
    default = declared.default
    if backend.switch is None or not any(declared.taken_by(option, default) for option in given):
        flags = _listed([option.flag for option in given])
        switches = sorted(_flag(declared, switch) for switch in owners)
        raise InvalidOption(
            f"{flags} {'is an option' if len(given) == 1 else 'are options'} of {' or '.join(switches)}",
            f"add {' or '.join(switches)}, or drop {flags}",
        )
    # what it lacks is what the default backend has: another switched backend's options are not listed
    lacked = [option.flag for option in others if declared.taken_by(option, default)]
    raise InvalidOption(f"{_flag(declared, backend.switch)} {backend.lacks}", f"drop {_listed(lacked)}")


def _instead(backend: DetachedBackend) -> str:
    """What the backend offers instead of an option it does not take, where it says (Slurm's --requeue)."""
    return f", or use {backend.instead}" if backend.instead else ""


def _listed(flags: list[str]) -> str:
    return ", ".join(flags[:-1]) + " and " + flags[-1] if len(flags) > 1 else flags[0]


def _flag(declared: DetachedOptions, dest: str | None) -> str:
    return next(option.flag for option in declared.options if option.dest == dest)


def detached_spec(
    declared: DetachedOptions,
    script: str,
    given: Mapping[str, Any],
    config: Mapping[str, Any],
    args: Iterable[str] = (),
    hosts: Mapping[str, str] | None = None,
) -> DetachedSpec:
    """A `%%train_detached` cell, or `jupyter-trainer submit`: its flags (`given`, by option name,
    None where not given) and the configured defaults. A flag always wins over config: a flagged
    option of another backend (--image) overrides a configured switch (--host), as a flagged
    switch overrides the configured options of the backends it does not choose."""
    metrics = given.get("metrics") or ()
    given = {option.dest: given.get(option.dest) for option in declared.options}
    backend = _chosen_with_config(declared, given, config)
    switches = {other.switch: other is backend for other in declared.backends if other.switch}
    taken = {option.dest for option in declared.options if declared.taken_by(option, backend)} - set(switches)
    values = settle(
        declared.options, {**given, **switches}, {dest: value for dest, value in config.items() if dest in taken}
    )
    return build_spec(declared, script, **values, metrics=metrics, args=args, hosts=hosts)


def _chosen_with_config(
    declared: DetachedOptions, given: Mapping[str, Any], config: Mapping[str, Any]
) -> DetachedBackend:
    """A switch flagged on chooses; else a configured switch (not flagged off), unless an option
    another backend cannot do without (--image, --container) is flagged; else the default backend."""
    if any(given.get(backend.switch) for backend in declared.backends if backend.switch):
        return chosen_backend(declared, given)
    needed_elsewhere = {dest for backend in declared.backends for dest in backend.needs_one_of}
    for backend in declared.backends:
        if backend.switch and given.get(backend.switch) is None and config.get(backend.switch):
            overriding = [
                option for option in declared.options
                if option.dest in needed_elsewhere and not declared.taken_by(option, backend)
                and given.get(option.dest) is not None
            ]  # fmt: skip
            if not overriding:
                return backend
    return declared.default
