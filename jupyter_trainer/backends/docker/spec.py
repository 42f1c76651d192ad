"""What the Docker backend's options mean together, when a `%%train_detached` cell becomes a spec:
the engine `--docker-host` chooses (kept as the spec's `engine`), the working directory as a path of
the machine that engine runs on, and `--sync`, which copies a directory to a remote one.

Declared as the Docker backend's `settle` (declared.py), which makes DockerOptions of what it
gives; pure logic, no docker-py.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import InvalidOption
from ...spec.checks import parse_remote_workdir, parse_workdir
from .hosts import LOCAL_SOCKET, resolve


def settle_docker_spec(parsed: dict[str, Any], hosts: Mapping[str, str] | None) -> dict[str, Any]:
    """The spec's fields from the parsed option values: `docker_host` (as given: a name, a context,
    nothing) becomes `engine`, the engine it chooses, which is what the job runs on."""
    fields = dict(parsed)
    engine = _engine(fields.pop("docker_host", None), hosts)
    fields["engine"] = engine.to_dict() if engine is not None else None
    remote = engine is not None and engine.remote
    # the workdir is a directory of the machine the job runs on
    fields["workdir"] = parse_remote_workdir(parsed.get("workdir")) if remote else parse_workdir(parsed.get("workdir"))
    if fields.get("sync") and not remote:
        raise InvalidOption(
            "--sync copies a directory to a remote Docker host, and this engine runs here",
            "drop --sync: --workdir is mounted into the container as it is",
        )
    return fields


def _engine(given: str | None, hosts: Mapping[str, str] | None):
    """The Docker engine chosen now (None: the local socket, as before engines could be chosen, so
    that those cells keep their fingerprints)."""
    engine = resolve(given, dict(hosts or {}))
    return None if engine.url == LOCAL_SOCKET and not engine.name else engine
