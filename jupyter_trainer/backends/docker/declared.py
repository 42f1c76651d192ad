"""What the Docker backend declares: its options and their typed values, its entry in the
registry, and the files it keeps in a run directory. Read at %load_ext: no docker-py here, and
its checks and its settle are named in this package, imported when a value is checked."""

from __future__ import annotations

from dataclasses import dataclass

from ...spec.options import (
    ENV,
    GPUS,
    INTERPRETER,
    NOTIFY,
    QUEUE,
    WORKDIR,
    BackendOptions,
    DetachedBackend,
    Option,
)
from ..declaration import Declaration

_CHECK = "jupyter_trainer.spec.checks:"
_OWN = "jupyter_trainer.backends.docker."

# the files of a run with --restarts, written beside the supervisor's (see restarts.py): how its
# container's keeper starts the job again (the supervisor's command, the job's environment, working
# directory and --notify input: secrets, emptied once the job has ended)
RESTART_FILE = "restart"
RESTARTS_FILE = "restarts"  # one line per start again, written by the container's keeper
NO_RESTART_FILE = "no_restart"  # written when a stop is asked, so that no keeper starts the job again

IMAGE = Option(
    "image",
    "--image",
    "create (if missing) a persistent container from IMAGE and run in it",
    "IMAGE",
    config=True,
    parse=_CHECK + "parse_image",
)
CONTAINER = Option(
    "container",
    "--container",
    "the persistent container to use or create",
    "NAME",
    config=True,
    parse=_CHECK + "parse_container",
)
STOP_CONTAINER_WHEN_DONE = Option(
    "stop_container_when_done",
    "--stop-container-when-done",
    "stop the container when the job ends, releasing its GPUs",
    kind="switch",
    config=True,
    default=False,
)
DOCKER_HOST = Option(
    "docker_host",
    "--docker-host",
    "the Docker engine: ssh://USER@HOST, tcp://HOST:2376 (TLS), unix:///PATH, "
    "a name from TrainerMagics.docker_hosts, or a Docker context (default: DOCKER_HOST, the current context)",
    "URL|NAME",
    config=True,
)  # settled into the engine it chooses (spec.py)
SYNC = Option(
    "sync",
    "--sync",
    "copy a local directory to the job's workdir on a remote Docker host before the job starts "
    "(a home directory is refused; the job store, credential files and what DIR/.trainerignore lists are left out)",
    "DIR",
    parse=_CHECK + "parse_sync",
)
RESTARTS = Option(
    "restarts", "--restarts", "when the job is interrupted without ending by itself (the Docker engine, the machine "
    "or its container restarted), start it again in its container, up to N times, with no kernel needed; it resumes "
    "from its own checkpoint",
    "N", "int", parse=_OWN + "restarts:parse_restarts",
    elsewhere="works with the container backends only (--image or --container, on this machine's Docker engine "
    "or a --docker-host's)",
)  # fmt: skip


@dataclass(frozen=True)
class DockerOptions(BackendOptions):
    """A Docker job's own options, as its spec holds them."""

    image: str | None = None
    container: str | None = None
    stop_container_when_done: bool = False
    engine: dict | None = None  # the Docker engine (hosts.Engine.to_dict); None: the local socket
    sync: str | None = None  # a local directory copied to a remote host's workdir first
    restarts: int | None = None  # --restarts N: how often its container may start it again

    def stored(self) -> dict:
        """As they were stored when they were fields of every spec: image, container and
        stop_container_when_done always, the three added later only when given, so that every
        cell keeps its fingerprint."""
        later = {"engine": self.engine, "sync": self.sync, "restarts": self.restarts}
        kept = {
            "image": self.image,
            "container": self.container,
            "stop_container_when_done": self.stop_container_when_done,
        }
        return {**kept, **{name: value for name, value in later.items() if value is not None}}

    def job_machine(self) -> str | None:
        from .hosts import Engine

        engine = Engine.of(self.engine)
        return engine.label if engine is not None and engine.remote else None

    def sent_directory(self) -> str | None:
        return self.sync


DETACHED = DetachedBackend(
    "docker",
    options=(
        IMAGE,
        CONTAINER,
        WORKDIR,
        GPUS,
        QUEUE,
        ENV,
        INTERPRETER,
        STOP_CONTAINER_WHEN_DONE,
        DOCKER_HOST,
        SYNC,
        RESTARTS,
        NOTIFY,
    ),
    needs_one_of=("image", "container"),
    missing=(
        "no image or container given",
        "pass --image IMAGE (or set %config TrainerMagics.image), --container NAME, or --host",
    ),
    settle=_OWN + "spec:settle_docker_spec",
    typed=DockerOptions,
)

DECLARATION = Declaration(
    "docker",
    entry=_OWN + "backend:DockerBackend",
    detached=DETACHED,
    run_files=(RESTART_FILE, RESTARTS_FILE, NO_RESTART_FILE),
)
