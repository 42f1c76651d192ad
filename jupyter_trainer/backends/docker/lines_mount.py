"""A Docker job that waits its turn in its machine's lines (`--gpus N`, `--queue NAME`; see
core/lines.py): the containers we create for such jobs mount the lines directory of the engine's
machine at the same path, so that its jobs, in containers or not, wait in one line per machine; and
they are given every GPU of that machine (each job sees its own through CUDA_VISIBLE_DEVICES,
numbered as nvidia-smi numbers them there).

A local engine's machine is this one: its lines directory is ours ($JUPYTER_TRAINER_LINES_DIR or
the default). A remote host keeps its own line, in the default directory there.
"""

from __future__ import annotations

from pathlib import Path

from ...core import lines
from ...core.record import JobRecord, Observation, Status
from ...core.store import LINE_FILE, TURN_FILE
from ...errors import InvalidOption
from ...spec.job_spec import DetachedSpec
from .. import turns
from ..turns import declared_pool, gpu_count, waits_in_line
from .errors import LOOK
from .hosts import Engine
from .in_container import read_container_file
from .runtime import RUN_FILES, TURN_FILES, DockerRuntime

LABEL_LINES = "jupyter_trainer.lines"  # the lines directory a container mounts (none: it mounts none)
HANDED_OUT = "handed-out"  # the GPUs label of a container made for --gpus N: every GPU, each job its own


def lines_root_of(engine: Engine) -> str:
    """The lines directory of the engine's machine."""
    return lines.DEFAULT_ROOT if engine.remote else lines.lines_root()


def gpus_label(spec: DetachedSpec) -> str:
    """What a container's GPUs label says it was made for."""
    return HANDED_OUT if gpu_count(spec.gpus) else spec.gpus or ""


def lines_volumes(spec: DetachedSpec, engine: Engine) -> tuple[dict, dict]:
    """(volumes, labels) a container made for `spec` adds: none for a job that waits in no line."""
    if not waits_in_line(spec):
        return {}, {}
    root = lines_root_of(engine)
    if not engine.remote:  # made here, sticky and open to all, before the engine would make it root's
        try:
            lines.ensure_root(root)
        except lines.LineError as problem:
            raise InvalidOption(
                f"this machine's lines cannot be used: {problem}", f"set {lines.LINES_ENV} to a directory of your own"
            ) from None
    return {root: {"bind": root, "mode": "rw"}}, {LABEL_LINES: root}


def handed_out_requests(spec: DetachedSpec, client) -> list:
    """The GPUs a container made for `--gpus N` jobs gets: all of its machine's, unless the GPUs
    handed out are a declared pool and the engine has no NVIDIA runtime to give any (then the pool
    is a line alone, as on a machine without GPUs)."""
    from docker.types import DeviceRequest

    if declared_pool(spec) is not None and "nvidia" not in (client.info().get("Runtimes") or {}):
        return []
    return [DeviceRequest(count=-1, capabilities=[["gpu"]])]


def check_offered(spec: DetachedSpec, engine: Engine) -> None:
    """`--gpus N` asks for no more GPUs than the engine's machine offers: one line otherwise, before
    anything is recorded. This machine's are known here; a remote host's only where a pool names
    them (else its waiter finds too few, and the job fails saying so)."""
    if not engine.remote:
        turns.check_gpus_offered(spec)
        turns.check_lines(spec, lines_root_of(engine))
    elif declared_pool(spec) is not None:
        turns.check_gpus_offered(spec, engine.label)


def check_lines_mounted(container, spec: DetachedSpec, engine: Engine) -> None:
    """A job that waits in a line needs a container that mounts its machine's lines."""
    if not waits_in_line(spec):
        return
    root = lines_root_of(engine)
    if container.labels.get(LABEL_LINES) == root:
        return
    what = "--gpus N" if gpu_count(spec.gpus) else "--queue"
    raise InvalidOption(
        f"container {container.name!r} does not mount this machine's lines ({root}), which {what} waits in",
        f"remove it (docker rm -f {container.name}) and the next job creates one that does, "
        "or use --image with another --workdir"
        if container.labels.get("jupyter_trainer") == "1"
        else "use --image: jupyter_trainer creates a container that does",
    )


def prepare_line(record: JobRecord, run_dir: Path, spec: DetachedSpec, engine: Engine) -> tuple[str, ...]:
    """The files of a run its container sees: with its waiter's, written here, for a job that waits
    its turn (in the lines of the engine's machine)."""
    if not waits_in_line(spec):
        return RUN_FILES
    turns.prepare_turn(run_dir, record, spec, lines_root_of(engine), same_clock=not engine.remote)
    return RUN_FILES + TURN_FILES


def waiting_job(spec: DetachedSpec, job: list[str], inner_run_dir: str) -> list[str]:
    """What the supervisor starts: the job, or its waiter, which runs the job in its turn."""
    return turns.waiting_command(inner_run_dir, job) if waits_in_line(spec) else job


def observed_turn(seen: Observation, record: JobRecord, run_dir: Path, clients, engine_of) -> Observation:
    """What its turn file says of a job that may wait in its machine's lines: read in the store
    where its container mounts it, else through the engine (`engine_of(record)`), while the job is pending."""
    if not turns.may_wait(record):
        return seen
    runtime = DockerRuntime.of(record)
    if runtime.mounted:
        return turns.with_turn(seen, run_dir)
    if record.status is not Status.PENDING:
        return seen
    with clients.calling(engine_of(record), LOOK) as client:
        container = client.containers.get(runtime.container_id)
        said = {
            name: read_container_file(container, f"{runtime.run_dir}/{name}", limit=turns.TURN_BYTES)
            for name in (LINE_FILE, TURN_FILE)
        }
    return turns.with_turn(seen, run_dir, said)
