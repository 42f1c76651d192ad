"""The Docker backend: the job's supervisor runs in a persistent container through a detached exec.

Each container that jupyter_trainer creates mounts a directory of its own in
the store, where each of its runs' files (script, log, exit code) is a hard
link to the run's files in the store: they live on this machine and outlive the
container, and a job sees its container's jobs only, not the whole store. A
container the user created is used as it is: the run's files are copied into it
and read back through the engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import socket
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import BackendUnavailable, CorruptRecord, ImageNotFound, InvalidOption, RunFileError, TrainerError, Unreachable
from ..jobs import NAME_PATTERN, JobRecord, Observation, Status
from ..resources import NVIDIA_SMI_QUERY, Usage, parse_nvidia_smi
from ..spec import DetachedSpec
from .._fs import make_private_dir
from ..store import JobStore
from .base import (
    CLOCK_FILE,
    EXIT_CODE_FILE,
    LOG_FILE,
    NOTIFIED_FILE,
    NOTIFY_FILE,
    PID_FILE,
    RUN_FILE_LIMIT,
    SCRIPT_FILE,
    STOP_GRACE_SECONDS,
    SUPERVISOR_FILE,
    FileLogSource,
    SupervisorFacts,
    job_environment,
    notify_input,
    malformed_runtime,
    prepare_supervised_run,
    read_runtime,
    read_supervisor_facts,
)
from . import store_mounts
from .in_container import (
    STOP_GROUPS,
    container_file,
    container_file_size,
    job_processes,
    read_container_file,
    run_in,
    runs_supervisor,
    stops_on_term,
)
from ..docker_hosts import LOCAL_SOCKET, Engine, resolve
from .engines import STREAMS_PER_HOST, Reachability, connect, remember_engine, used_engines
from .sync import sync_directory
from .links import link_run, unlink_run
from .streamed_log import FOLLOW_LOG, HEARTBEAT_SECONDS, StreamedLog

MOUNTED_JOBS_DIR = "/jupyter_trainer/jobs"  # where containers we create see their runs' files
RUN_FILES = (SCRIPT_FILE, SUPERVISOR_FILE, NOTIFY_FILE, LOG_FILE, PID_FILE, EXIT_CODE_FILE, NOTIFIED_FILE, CLOCK_FILE)
SHIPPED_JOBS_DIR = "/tmp/jupyter_trainer/jobs"  # run files copied into containers we did not create
# A run's directory in a container: MOUNTED_JOBS_DIR/NAME/RUN or SHIPPED_JOBS_DIR/STORE_ID/NAME/RUN
INNER_RUN_DIR = re.compile(
    r"(?:/jupyter_trainer/jobs|/tmp/jupyter_trainer/jobs/[0-9a-f]{12})/[A-Za-z0-9][A-Za-z0-9_.-]{0,62}/[0-9]{1,9}"
)
WORKSPACE = "/workspace"
LABEL = "jupyter_trainer"
LABEL_JOBS_DIR = "jupyter_trainer.jobs_dir"
LABEL_WORKDIR = "jupyter_trainer.workdir"
LABEL_GPUS = "jupyter_trainer.gpus"
LABEL_STORE = "jupyter_trainer.store"  # the store's id (JobStore.store_id): stores of the same path differ
LABEL_CONTAINER = "jupyter_trainer.container"  # on a volume we made: the container it was made for
KEEP_ALIVE = ["tail", "-f", "/dev/null"]
PING_VALID_SECONDS = 5.0  # an engine that answered this recently is not asked again before a submission


@dataclass(frozen=True)
class DockerRuntime:
    """A job in a container: which container (and which start of it), the exec of its supervisor,
    and where its run's files are in the container."""

    container_id: str
    container_name: str
    container_started_at: str
    exec_id: str
    run_dir: str  # in the container
    mounted: bool  # the run's files are the store's, through the container's own directory
    shared_dir: str | None = None  # that directory's name in the store's containers/
    engine: dict | None = None  # the engine it runs on (docker_hosts.Engine.to_dict); None in older records
    sync_facts: list | None = None  # what --sync left out, in words (credential paths, never contents)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, record: JobRecord) -> "DockerRuntime":
        kinds = {"container_id": str, "container_name": str, "container_started_at": str, "exec_id": str, "run_dir": str}
        runtime = read_runtime(cls, record, {**kinds, "mounted": bool, "shared_dir": (str, "optional"), "engine": (dict, "optional"), "sync_facts": (list, "optional")})
        if runtime.sync_facts is not None and not all(isinstance(fact, str) for fact in runtime.sync_facts):
            raise malformed_runtime(record, "sync_facts is not a list of words")
        if not INNER_RUN_DIR.fullmatch(runtime.run_dir):
            raise malformed_runtime(record, "run_dir is not a run's directory")
        if runtime.shared_dir is not None and not NAME_PATTERN.fullmatch(runtime.shared_dir):
            raise malformed_runtime(record, "shared_dir is not a container's name")
        return runtime


# nvidia-smi in the container, if it has one ("none" if not); its query comes as arguments. A
# wedged driver hangs it: after 2 s the exec's whole process group (the engine makes the exec's
# shell its leader) is killed, nvidia-smi and whatever it started with it.
GPU_QUERY = (
    'command -v nvidia-smi >/dev/null 2>&1 || { echo none; exit 0; }; '
    '(sleep 2; kill -9 -$$) 2>/dev/null & watchdog=$!; '
    'nvidia-smi "$@"; status=$?; kill $watchdog 2>/dev/null; exit $status'
)
ORPHAN_DIR_AGE = 3600.0  # seconds: a store directory of no container is removed only once this old
GPU_QUERY_SECONDS = 3.0  # the answer awaited at most (the container's own tools may be replaced)
GPU_QUERY_BACKOFF = 600.0  # seconds a container whose nvidia-smi did not answer is not asked again


def default_container_name(image: str, workdir: str) -> str:
    """One container per image and working directory."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", image.rsplit("/", 1)[-1]).strip("-.")[:32] or "image"
    digest = hashlib.sha256(f"{image}\0{workdir}".encode()).hexdigest()[:8]
    return f"jt-{slug}-{digest}"


def gpu_requests(gpus: str | None) -> list:
    if not gpus:
        return []
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if "," in gpus:
        return [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


def engine_errors() -> tuple[type[BaseException], ...]:
    """What a call to an engine raises when the engine, or the way to it, fails (SSH's own errors
    are not OSErrors)."""
    import docker

    errors: tuple[type[BaseException], ...] = (docker.errors.DockerException, OSError, EOFError)
    try:
        import paramiko
    except ImportError:
        return errors
    return (*errors, paramiko.SSHException)


def _busy(exc: BaseException | None) -> bool:
    """Whether an SSH server refused a new session of a connection that is up (MaxSessions reached)."""
    try:
        import paramiko
    except ImportError:
        return False
    while exc is not None:
        if isinstance(exc, paramiko.ChannelException):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def unreachable(engine: Engine, cause: BaseException | None = None) -> BackendUnavailable:
    """The engine did not answer: for a remote host, an Unreachable that names it."""
    if engine.remote:
        return Unreachable(engine.label, f"cannot reach the Docker engine on {engine.label}")
    return engine.unreachable(cause)


class DockerBackend:
    name = "docker"
    status_interval = 2.0  # seconds between two status checks by a widget
    usage_outlives_the_job = False
    has_containers = True

    def __init__(self):
        self._clients: dict[str, object] = {}  # by engine URL: each job names its engine
        self._clients_lock = threading.Lock()
        self._reach = Reachability()
        self._pinged: dict[str, float] = {}
        self._without_gpus: set[str] = set()  # containers found to have no nvidia-smi
        self._gpus_silent_until: dict[str, float] = {}  # containers whose nvidia-smi did not answer
        self._log_streams: dict[tuple[str, str, str], StreamedLog] = {}

    # -- the engine --------------------------------------------------------

    def engine_of(self, record: JobRecord) -> Engine:
        """The engine the job runs on, as its record names it (never the reader's DOCKER_HOST). A
        record from before engines were recorded names none: the engine the environment chooses."""
        return Engine.of(record.runtime.get("engine")) or Engine.of(record.options.get("engine")) or self._default_engine()

    @staticmethod
    def _spec_engine(spec: DetachedSpec) -> Engine:
        """The engine a new job runs on: the one its cell chose (none: the local socket)."""
        return Engine.of(spec.engine) or Engine(LOCAL_SOCKET)

    @staticmethod
    def _default_engine() -> Engine:
        try:
            return resolve(None)
        except InvalidOption as exc:  # a DOCKER_CONTEXT that names nothing
            raise BackendUnavailable(str(exc)) from None

    def client_of(self, engine: Engine, purpose: str = "calls"):
        """The client of an engine, made on first use. An engine that failed a moment ago is not
        asked again before RETRY_AFTER_SECONDS: a host that is down costs every poll nothing.
        Log streams have a client of their own: over SSH, a connection of their own, whose sessions
        (sshd allows 10 per connection) the calls of the views and pollers do not share."""
        key = f"{purpose} {engine.url}"
        with self._clients_lock:
            client = self._clients.get(key)
        if client is not None:
            return client
        if engine.remote and self._reach.resting(engine):  # a local engine is asked again at once: Docker may just have started
            raise unreachable(engine)
        try:
            client = connect(engine)
        except BackendUnavailable as exc:
            self._reach.failed(engine)
            raise unreachable(engine, exc.__cause__) from exc
        with self._clients_lock:
            return self._clients.setdefault(key, client)

    def _lost(self, engine: Engine, exc: BaseException | None = None) -> BackendUnavailable:
        """A call to the engine failed on the way: its client is dropped (an SSH connection that died
        stays dead; the next call makes a new one), and the error says which host."""
        if _busy(exc):  # the host answered, but has no session to spare just now: not a lost host
            return BackendUnavailable(f"the Docker engine on {engine.label} has no SSH session to spare just now (sshd's MaxSessions)")
        self._reach.failed(engine)
        with self._clients_lock:
            clients = [self._clients.pop(key) for key in list(self._clients) if key.endswith(f" {engine.url}")]
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()
        return unreachable(engine, exc)

    def _engine_error(self, exc: Exception, doing: str, engine: Engine) -> TrainerError:
        import docker

        if isinstance(exc, docker.errors.APIError):
            detail = exc.explanation or str(exc)
            return TrainerError(f"Docker refused to {doing}: {detail}")
        self._lost(engine, exc)
        if engine.remote and doing == "start the job":
            return Unreachable(
                engine.label,
                f"lost the Docker engine on {engine.label} while starting the job, so nothing was recorded",
                "once it answers again, look there (docker ps) before you submit again: the job may have started",
            )
        if engine.remote:
            return Unreachable(engine.label, f"cannot reach the Docker engine on {engine.label} while trying to {doing}", "check the host and your connection to it; the job's record is kept")
        return BackendUnavailable(
            f"lost contact with the Docker engine at {engine.url} while trying to {doing}",
            "check that Docker is running",
        )

    # -- launching ---------------------------------------------------------

    def preflight(self, spec: DetachedSpec) -> None:
        engine = self._spec_engine(spec)
        if time.monotonic() - self._pinged.get(engine.url, float("-inf")) < PING_VALID_SECONDS:
            return
        try:
            self.client_of(engine).ping()
            self._pinged[engine.url] = time.monotonic()
        except engine_errors() as exc:
            raise self._lost(engine, exc) from exc
        self._reach.answered(engine)

    def prepare(self, run_dir: Path, spec: DetachedSpec) -> None:
        prepare_supervised_run(run_dir, spec.script, spec.from_cell)

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> DockerRuntime:
        engine = self._spec_engine(spec)
        try:
            return self._start(record, run_dir, spec, engine)
        except TrainerError:
            raise
        except engine_errors() as exc:
            raise self._engine_error(exc, "start the job", engine) from exc

    def _start(self, record: JobRecord, run_dir: Path, spec: DetachedSpec, engine: Engine) -> DockerRuntime:
        jobs_dir = run_dir.parent.parent
        client = self.client_of(engine)
        if engine.remote:
            remember_engine(jobs_dir.parent, engine)
        container = self._ensure_container(spec, jobs_dir, client, engine)
        relative = f"{record.name}/{record.run}"
        # a remote engine's containers cannot see this machine's store: the files are copied in
        shared_dir = None if engine.remote else self._store_mount(container, jobs_dir)
        if shared_dir is not None and not link_run(shared_dir, record.name, record.run, run_dir, RUN_FILES):
            shared_dir = None  # no hard links here: copy the files in instead
        if shared_dir is not None:
            inner_run_dir = f"{MOUNTED_JOBS_DIR}/{relative}"
        else:
            # several stores (users, JUPYTER_TRAINER_HOMEs) may share a container: one directory each
            store_id = JobStore(jobs_dir.parent).store_id()
            inner_run_dir = f"{SHIPPED_JOBS_DIR}/{store_id}/{relative}"
            self._ship(container, run_dir, inner_run_dir)
        ours = container.labels.get(LABEL) == "1"
        sync_facts = None
        if spec.sync:
            sync_facts = sync_directory(container, spec.sync, WORKSPACE if ours else container.attrs["Config"].get("WorkingDir") or "/", jobs_dir.parent)
        command = [
            "sh", f"{inner_run_dir}/{SUPERVISOR_FILE}", inner_run_dir, str(STOP_GRACE_SECONDS),
            "1" if spec.stop_container_when_done else "0",
            *spec.interpreter, f"{inner_run_dir}/{SCRIPT_FILE}", *spec.args,
        ]  # fmt: skip
        try:
            given = notify_input(record, run_dir, spec.notify)
            exec_id = client.api.exec_create(
                container.id,
                command,
                stdin=bool(given),
                stdout=False,
                stderr=False,
                environment=job_environment(spec),
                workdir=WORKSPACE if ours else None,
            )["Id"]
            if given:  # handed to the supervisor on its stdin, then let go: it goes on detached
                give_stdin(client.api.exec_start(exec_id, socket=True), given)
            else:
                client.api.exec_start(exec_id, detach=True)
        except BaseException:
            if shared_dir is not None:
                unlink_run(shared_dir, record.name, record.run, RUN_FILES)  # the store discards the run
            raise
        return DockerRuntime(
            container_id=container.id,
            container_name=container.name,
            container_started_at=container.attrs["State"]["StartedAt"],
            exec_id=exec_id,
            run_dir=inner_run_dir,
            mounted=shared_dir is not None,
            shared_dir=shared_dir.name if shared_dir is not None else None,
            engine=engine.to_dict(),
            sync_facts=sync_facts or None,
        )

    def _ensure_container(self, spec: DetachedSpec, jobs_dir: Path, client, engine: Engine):
        """The job's container, running: found, or created, or started again. Under the store's
        containers lock (shared), so that a prune does not remove it between found and started."""
        with JobStore(jobs_dir.parent).containers_lock(shared=True):
            return self._running_container(spec, jobs_dir, client, engine)

    @staticmethod
    def _container_name(container: str | None, image: str | None, workdir: str | None, engine: Engine, store: JobStore) -> str:
        """The container a job runs in: the one it names, else one per image and working directory
        (on a remote host, where other laptops and users meet, one per store too)."""
        if container:
            return container
        return default_container_name(image or "", f"{workdir}\0{store.store_id()}" if engine.remote else workdir)

    def remove_unused_containers(self, store: JobStore, records: list[JobRecord]) -> list[str]:
        """`prune --containers`: the stopped containers the store's jobs ran in (on every engine it
        used) that none of its remaining Docker records (`records`) names."""
        in_use: set[str] = set()
        for record in records:
            in_use |= self.containers_named_by(record, store)
        return self.remove_stopped_containers(store.jobs_dir, in_use)

    def containers_named_by(self, record: JobRecord, store: JobStore) -> set[str]:
        """The containers a job's record names: the one it runs in; while it is being launched (no
        runtime yet), the one its launch finds or creates, which may be stopped at that moment."""
        name = record.runtime.get("container_name")
        if isinstance(name, str):
            return {name}
        if record.runtime or record.status.is_final:
            return set()
        container, image, workdir = (record.options.get(key) for key in ("container", "image", "workdir"))
        if isinstance(container, str) and container:
            return {container}
        if not isinstance(image, str) or not isinstance(workdir, (str, type(None))):
            return set()
        engine = Engine.of(record.options.get("engine")) or Engine(LOCAL_SOCKET)
        return {self._container_name(None, image, workdir, engine, store)}

    def _running_container(self, spec: DetachedSpec, jobs_dir: Path, client, engine: Engine):
        import docker

        name = self._container_name(spec.container, spec.image, spec.workdir, engine, JobStore(jobs_dir.parent))
        try:
            container = client.containers.get(name)
        except docker.errors.NotFound:
            if not spec.image:
                where = f" on {engine.label}" if engine.remote else ""
                raise InvalidOption(
                    f"no container named {name!r}{where}", "pass --image IMAGE to create it, or name a running container"
                ) from None
            if engine.remote:
                container = self._create_remote_container(name, spec, jobs_dir, client)
            else:
                container = self._create_container(name, spec, jobs_dir, client)
        if not engine.remote:  # a remote host cannot reach this machine's store, whatever it mounts
            self._check_store_unreachable(container, jobs_dir)
        self._check_gpus(container, spec)
        if container.status != "running":
            if container.labels.get(LABEL) != "1":
                raise InvalidOption(
                    f"container {name!r} is {container.status}", f"start it (docker start {name}) or choose another"
                )
            container.start()
            container.reload()
        if spec.stop_container_when_done:
            self._check_stops_on_term(container)
        return container

    def _check_stops_on_term(self, container) -> None:
        """The supervisor stops the container from inside, with TERM to its PID 1. A PID 1 without a
        TERM handler never gets it (the kernel shields a namespace's init), so refuse at once
        rather than leave the GPUs held after the job."""
        if container.labels.get(LABEL) == "1" or container.attrs["HostConfig"].get("Init"):
            return  # an init forwards TERM to the main process
        status = run_in(container, "cat /proc/1/status", limit=1 << 16)
        if stops_on_term(status.decode(errors="replace")):
            return
        raise InvalidOption(
            f"--stop-container-when-done: container {container.name!r} cannot stop itself, its main process ignores TERM",
            f"start it with docker run --init, or drop the option and stop it afterwards with docker stop {container.name}",
        )

    def _check_store_unreachable(self, container, jobs_dir: Path) -> None:
        """An existing container is reused as it is, unless it can reach the job store (see store_mounts)."""
        home = jobs_dir.parent
        attrs = container.attrs
        mounts = [
            store_mounts.Mount(mount["Source"], mount["Destination"])
            for mount in attrs.get("Mounts") or []
            if mount.get("Source") and mount.get("Destination")
        ]
        mounted_over = {mount.destination for mount in mounts} | set((attrs.get("HostConfig") or {}).get("Tmpfs") or {})
        own_dir = str(JobStore(home).container_dir(container.name)) if container.labels.get(LABEL) == "1" else None
        host_config = attrs.get("HostConfig") or {}
        reason = store_mounts.exposure(mounts, mounted_over, str(home), own_dir)
        if host_config.get("Privileged"):
            reason = "it is privileged: it can mount this machine's disks"
        elif host_config.get("PidMode") == "host":
            reason = "it shares this machine's processes (--pid=host), and their files through /proc"
        if reason is not None:
            raise InvalidOption(
                f"container {container.name!r} can reach the job store ({reason}), "
                "so a job in it could read or change every job's files",
                f"remove it (docker rm -f {container.name}) and the next job creates a safe one, or use a container that does not mount {home}",
            )

    def _check_gpus(self, container, spec: DetachedSpec) -> None:
        """GPUs cannot be given to a container afterwards."""
        labels = container.labels
        if spec.gpus and labels.get(LABEL) == "1" and labels.get(LABEL_GPUS, "") != spec.gpus:
            raise InvalidOption(
                f"container {container.name!r} was created with --gpus {labels.get(LABEL_GPUS) or 'none'}, not {spec.gpus}",
                f"stop and remove it (docker rm -f {container.name}) or choose another --container",
            )

    def _create_container(self, name: str, spec: DetachedSpec, jobs_dir: Path, client):
        home = jobs_dir.parent
        if store_mounts.is_inside(spec.workdir, str(home)):
            raise InvalidOption(
                f"--workdir {spec.workdir} is inside the job store ({home})", "choose a directory outside it"
            )
        self._ensure_image(spec.image, client)
        own_dir = JobStore(home).container_dir(name)
        # the store may lie inside the workspace (a notebook in ~): cover it, and pin the way to it
        try:
            needed = store_mounts.protection([store_mounts.Mount(spec.workdir, WORKSPACE)], str(home))
        except store_mounts.Unprotectable as problem:
            raise InvalidOption(
                f"--workdir {spec.workdir} cannot be given to a container: {problem}",
                f"set JUPYTER_TRAINER_HOME={os.path.realpath(home)} (the store's real place), or choose another --workdir",
            ) from None
        volumes = {spec.workdir: {"bind": WORKSPACE, "mode": "rw"}}
        volumes.update({pin.source: {"bind": pin.destination, "mode": "rw"} for pin in needed.pins})
        volumes[str(own_dir)] = {"bind": MOUNTED_JOBS_DIR, "mode": "rw"}
        make_private_dir(own_dir)
        return self._run_container(client, name, spec, jobs_dir, volumes, tmpfs={cover: "ro,size=4k,mode=0500" for cover in needed.covers})

    def _create_remote_container(self, name: str, spec: DetachedSpec, jobs_dir: Path, client):
        """A container on another machine: its workdir is a directory there (--workdir) or a volume
        of its own, and its runs' files are kept on a volume of its own there, so that they outlive
        both the container and the laptop that started the job."""
        self._ensure_image(spec.image, client)
        workspace = spec.workdir or f"{name}-workspace"
        volumes = {
            workspace: {"bind": WORKSPACE, "mode": "rw"},
            self._runs_volume(client, name, self._spec_engine(spec), JobStore(jobs_dir.parent)): {"bind": SHIPPED_JOBS_DIR, "mode": "rw"},
        }
        return self._run_container(client, name, spec, jobs_dir, volumes, tmpfs={})

    @staticmethod
    def _runs_volume(client, container_name: str, engine: Engine, store: JobStore) -> str:
        """The volume a remote container keeps its runs' files on, created here with our labels (a
        prune removes it with the container only if they say it is this store's). A volume of that
        name that we did not make is someone's own: it is neither written to nor ever removed."""
        name = f"{container_name}-runs"
        labels = {LABEL: "1", LABEL_CONTAINER: container_name, LABEL_STORE: store.store_id()}
        volume = client.volumes.create(name=name, labels=labels)  # one that exists is returned as it is
        found = volume.attrs.get("Labels") or {}
        if found.get(LABEL) != "1" or found.get(LABEL_CONTAINER) != container_name:
            raise InvalidOption(
                f"a volume named {name!r} already exists on {engine.label} and is not labelled as jupyter_trainer's "
                f"(someone's own, or left by an older version), so container {container_name!r} cannot keep its runs' files there",
                f"choose another --container, or remove that volume if nothing in it is needed (docker volume rm {name})",
            )
        return name

    @staticmethod
    def _remove_runs_volume(container, store: JobStore) -> None:
        """Remove the volume a removed remote container kept its runs' files on, if it is the one we
        made for it for this store; a user's volume mounted there (or one made before volumes were
        labelled) stays. Its workspace volume holds the user's work, and stays too."""
        mounted = next(
            (mount.get("Name") for mount in container.attrs.get("Mounts") or [] if mount.get("Type") == "volume" and mount.get("Destination") == SHIPPED_JOBS_DIR),
            None,
        )
        if not mounted:
            return
        with contextlib.suppress(*engine_errors()):  # gone already, or used by another container
            volume = container.client.volumes.get(mounted)
            labels = volume.attrs.get("Labels") or {}
            if labels.get(LABEL) == "1" and labels.get(LABEL_CONTAINER) == container.name and labels.get(LABEL_STORE) == store.store_id():
                volume.remove()

    def _run_container(self, client, name: str, spec: DetachedSpec, jobs_dir: Path, volumes: dict, tmpfs: dict):
        import docker

        try:
            return client.containers.run(
                spec.image,
                KEEP_ALIVE,
                name=name,
                detach=True,
                init=True,
                working_dir=WORKSPACE,
                volumes=volumes,
                labels={
                    LABEL: "1",
                    LABEL_JOBS_DIR: str(jobs_dir),
                    LABEL_STORE: JobStore(jobs_dir.parent).store_id(),
                    LABEL_WORKDIR: spec.workdir,
                    LABEL_GPUS: spec.gpus or "",
                },
                tmpfs=tmpfs,
                # a job's --notify URL on the engine's machine is reachable from inside as host.docker.internal
                extra_hosts={"host.docker.internal": "host-gateway"},
                device_requests=gpu_requests(spec.gpus),
            )
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # another process is creating it this moment
                return self._wait_for_container(name, client)
            self._remove_unstarted(client, name, jobs_dir)
            detail = exc.explanation or str(exc)
            if spec.gpus and "gpu" in str(detail).lower():
                raise BackendUnavailable(
                    f"Docker cannot give the container GPUs ({detail})",
                    "install the NVIDIA Container Toolkit, or drop --gpus",
                ) from exc
            raise TrainerError(f"Docker could not create container {name!r}: {detail}") from exc

    @staticmethod
    def _remove_unstarted(client, name: str, jobs_dir: Path) -> None:
        """A container created but not started (a mount its engine refused, say) is no use to anyone."""
        with contextlib.suppress(*engine_errors()):
            container = client.containers.get(name)
            if container.status == "created" and container.labels.get(LABEL_JOBS_DIR) == str(jobs_dir):
                container.remove(force=True)

    def _wait_for_container(self, name: str, client, timeout: float = 30.0):
        import docker

        # the engine reserves the name before the container can be inspected
        deadline = time.monotonic() + timeout
        while True:
            try:
                return client.containers.get(name)
            except docker.errors.NotFound:
                if time.monotonic() > deadline:
                    raise TrainerError(f"container {name!r} is being created by another process and has not appeared")
                time.sleep(0.1)

    def _ensure_image(self, image: str, client) -> None:
        import docker

        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.pull(image)
        except docker.errors.DockerException as exc:
            detail = getattr(exc, "explanation", None) or str(exc)
            raise ImageNotFound(
                f"image {image!r} is not on this machine and could not be pulled ({detail})",
                "build or pull it first, or check the name",
            ) from exc

    def _store_mount(self, container, jobs_dir: Path) -> Path | None:
        """The container's own directory in this store, where it sees its runs' files; None for a
        container that mounts nothing of this store."""
        source = next(
            (mount.get("Source", "") for mount in container.attrs.get("Mounts", []) if mount.get("Destination") == MOUNTED_JOBS_DIR),
            None,
        )
        if source is None:
            return None
        source = Path(os.path.realpath(source))
        if source.parent == Path(os.path.realpath(JobStore(jobs_dir.parent).containers_dir)):
            return source
        return None  # another store's container

    def _ship(self, container, run_dir: Path, inner_run_dir: str) -> None:
        """Copy the run's files into a container that does not mount the store."""
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            parts = PurePosixPath(inner_run_dir).parts[1:]
            for depth in range(1, len(parts) + 1):  # the directories, so that they exist
                info = tarfile.TarInfo("/".join(parts[:depth]))
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                tar.addfile(info)
            for name in RUN_FILES:
                tar.add(run_dir / name, arcname="/".join((*parts, name)))
        container.put_archive("/", archive.getvalue())

    # -- following ---------------------------------------------------------

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        import docker

        runtime = DockerRuntime.of(record)
        engine = self.engine_of(record)
        label = runtime.container_name + (f" on {engine.label}" if engine.remote else "")
        if not runtime.mounted and record.status is Status.RUNNING and self._still_supervised(engine, runtime):
            # one request, not five: the supervisor's exec runs, so the container runs as it did when
            # the job started (a restart ends its execs) and the job has not ended (the supervisor
            # writes its exit code, then ends). Its files are read once the supervisor has ended.
            return Observation(alive=True, started=True)
        try:
            try:
                container = self._looking_client(engine).containers.get(runtime.container_id)
            except docker.errors.NotFound:
                facts = read_supervisor_facts(run_dir) if runtime.mounted else SupervisorFacts()
                self._release(record, run_dir)
                if facts.exit_code is not None:
                    return facts.ended()
                return Observation(alive=False, why_gone=f"container {label} was removed while the job ran")
            state = container.attrs["State"]
            restarted = state.get("StartedAt") != runtime.container_started_at
            supervised = state.get("Running") and not restarted and self._supervisor_running(container, runtime)
            facts = self._facts(container, record, run_dir)  # read after the liveness check: no race
            # the supervisor was killed but the job goes on, whatever its files say
            orphaned = (
                state.get("Running") and not restarted and not supervised
                and bool(job_processes(container, runtime.run_dir)["job"])
            )  # fmt: skip
        except TrainerError:
            raise
        except engine_errors() as exc:
            raise self._lost_while_looking(engine, exc) from exc
        self._reach.answered(engine)
        if orphaned:  # it can no longer record its exit code
            return Observation(alive=True, started=True)
        if facts.exit_code is not None and not supervised:  # the job can write it too: it counts once the supervisor is gone
            self._release(record, run_dir)
            return facts.ended()
        if facts.problem:
            if not supervised:
                self._release(record, run_dir)
            return facts.unknown(bool(supervised))
        if supervised:
            return Observation(alive=True, started=facts.job_pid is not None)
        self._release(record, run_dir)
        if not state.get("Running"):
            why = f"container {label} stopped (exit code {state.get('ExitCode')}) while the job ran"
        elif restarted:
            why = f"container {label} restarted while the job ran; its processes did not survive"
        else:
            why = "the job's supervisor process ended without recording an exit code" + self._exec_outcome(container, runtime.exec_id)
        return Observation(alive=False, why_gone=why)

    def _looking_client(self, engine: Engine):
        """The engine's client for a look at a job: an engine that does not answer says nothing of
        the job, which keeps its status (see Job._observe), with these words."""
        try:
            return self.client_of(engine)
        except Unreachable:
            raise
        except BackendUnavailable:
            raise BackendUnavailable(f"cannot reach the Docker engine at {engine.url}") from None

    def _lost_while_looking(self, engine: Engine, exc: BaseException) -> BackendUnavailable:
        lost = self._lost(engine, exc)
        return lost if engine.remote else BackendUnavailable(f"cannot reach the Docker engine at {engine.url}")

    def _still_supervised(self, engine: Engine, runtime: DockerRuntime) -> bool:
        try:
            running = bool(self._looking_client(engine).api.exec_inspect(runtime.exec_id).get("Running"))
        except engine_errors() as exc:
            import docker

            if isinstance(exc, docker.errors.NotFound):
                return False  # the engine restarted and forgot its execs: the long way
            raise self._lost_while_looking(engine, exc) from exc
        self._reach.answered(engine)
        return running

    def _release(self, record: JobRecord, run_dir: Path) -> None:
        """The job has ended: its files need no longer be in its container's directory."""
        shared = DockerRuntime.of(record).shared_dir  # a name in this store's containers/, nothing else
        if shared is not None:
            unlink_run(JobStore.of_run(run_dir).container_dir(shared), record.name, record.run, RUN_FILES)

    def _exec_outcome(self, container, exec_id: str) -> str:
        """How the supervisor's exec ended, in words, when the engine still knows."""
        try:
            code = container.client.api.exec_inspect(exec_id).get("ExitCode")
        except engine_errors():
            return " (was it killed?)"
        if code in (None, 0, 137, 143):
            return " (was it killed?)"
        return f" (it exited with code {code}: can the container's user read and write the store's files?)"

    def _supervisor_running(self, container, runtime: DockerRuntime) -> bool:
        import docker

        try:
            return bool(container.client.api.exec_inspect(runtime.exec_id).get("Running"))
        except docker.errors.NotFound:
            # The engine restarted and forgot its execs. With live-restore the container and the
            # processes in it lived on: look for the supervisor among them.
            try:
                listing = container.top(ps_args="-ww -eo pid,args")  # whole command lines, whatever dockerd's COLUMNS
            except docker.errors.APIError:  # an engine whose ps takes no such options
                listing = container.top()
            return runs_supervisor(listing, runtime.run_dir)

    def _facts(self, container, record: JobRecord, run_dir: Path) -> SupervisorFacts:
        runtime = DockerRuntime.of(record)
        if runtime.mounted:
            return read_supervisor_facts(run_dir)
        inner = runtime.run_dir
        exit_code, written_at = container_file(container, f"{inner}/{EXIT_CODE_FILE}", limit=RUN_FILE_LIMIT)
        facts = SupervisorFacts.parse(read_container_file(container, f"{inner}/{PID_FILE}", limit=RUN_FILE_LIMIT), exit_code)
        return dataclasses.replace(facts, ended_at=written_at) if facts.exit_code is not None else facts

    def log_source(self, record: JobRecord, run_dir: Path):
        if not record.runtime:  # not launched yet
            return FileLogSource(run_dir / LOG_FILE)
        runtime = DockerRuntime.of(record)
        if runtime.mounted:
            return FileLogSource(run_dir / LOG_FILE)
        engine = self.engine_of(record)
        source = ContainerLogSource(self, engine, runtime.container_id, f"{runtime.run_dir}/{LOG_FILE}")
        if not engine.remote:
            return source
        return self._streamed(source)

    def _streamed(self, source: "ContainerLogSource"):
        """A remote log, followed through one stream that every view of it shares (see streamed_log);
        past STREAMS_PER_HOST followed logs on one host, the others are polled through the engine."""
        key = (source.engine.url, source.container_id, source.path)
        with self._clients_lock:
            for other, streamed in list(self._log_streams.items()):
                if streamed.idle:
                    streamed.close()
                    del self._log_streams[other]
            if key not in self._log_streams:
                if sum(other[0] == key[0] for other in self._log_streams) >= STREAMS_PER_HOST:
                    return source
                self._log_streams[key] = StreamedLog(source, source.open_stream)
            return self._log_streams[key]

    def describe_where(self, record: JobRecord) -> str:
        name = record.runtime.get("container_name") if isinstance(record.runtime.get("container_name"), str) else None
        engine = Engine.of(record.options.get("engine"))
        on = f" on {engine.label}" if engine is not None and engine.remote else ""
        return f"container {name or record.options.get('container') or '?'}{on}"

    def describe_host(self, record: JobRecord) -> str | None:
        """The engine's host by the name the user chose it by; "local" for this machine's engine."""
        engine = Engine.of(record.options.get("engine"))
        return engine.label if engine is not None else "local"

    def describe_facts(self, record: JobRecord) -> list[str]:
        try:
            return list(DockerRuntime.of(record).sync_facts or []) if record.runtime else []
        except CorruptRecord:
            return []

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return []  # what it left stays in its container, which `stop --container` ends

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        """The container's use (the engine's stats: all of its processes, as `docker stats` shows),
        and its GPUs from nvidia-smi inside it when it has one."""
        if not record.runtime:
            return None
        try:
            container = self.client_of(self.engine_of(record)).containers.get(DockerRuntime.of(record).container_id)
            if container.status != "running":
                return None
            stats = container.stats(stream=False, one_shot=True)
            cpu = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
            memory = stats.get("memory_stats", {})
            used = memory.get("usage")
            if used is not None:  # less the page cache it can drop, as docker stats counts it
                details = memory.get("stats", {})
                used -= details.get("inactive_file", details.get("total_inactive_file", 0))
            return Usage(
                "container",
                cpu_seconds=None if cpu is None else cpu / 1e9,
                memory_bytes=used,
                memory_limit_bytes=memory.get("limit"),
                gpus=self._gpus(container),
            )
        except Exception:  # the stats of a container a job controls: never worth a failure of the view
            return None

    def _gpus(self, container) -> tuple:
        """The container's GPUs as its nvidia-smi sees them. A container without one is not asked
        again; one whose nvidia-smi did not answer in time, not for GPU_QUERY_BACKOFF seconds."""
        if container.id in self._without_gpus or time.monotonic() < self._gpus_silent_until.get(container.id, 0.0):
            return ()
        try:
            answer = run_in(container, GPU_QUERY, *NVIDIA_SMI_QUERY, limit=64 << 10, seconds=GPU_QUERY_SECONDS)
        except BackendUnavailable:
            self._gpus_silent_until[container.id] = time.monotonic() + GPU_QUERY_BACKOFF
            return ()
        text = answer.decode("utf-8", "replace")
        if text.strip() == "none":
            self._without_gpus.add(container.id)
            return ()
        return parse_nvidia_smi(text)

    def remove_stopped_containers(self, jobs_dir: Path, in_use: set[str]) -> list[str]:
        """Remove the containers this store created, on this machine's engine and on every remote
        host it has used, that are not running and that no remaining job names (with their
        directories in the store, or on a remote host the volume of their runs' files); their names.
        A host that cannot be reached is named in the error, after the others were done."""
        store = JobStore(jobs_dir.parent)
        removed, failed, existing = [], [], set()
        for engine in [Engine(LOCAL_SOCKET), *used_engines(store.home)]:
            try:
                containers = self.client_of(engine).containers.list(all=True, filters={"label": f"{LABEL}=1"})
            except (BackendUnavailable, *engine_errors()) as exc:
                if engine.remote:
                    failed.append(f"the containers on {engine.label} (it cannot be reached: {exc})")
                    continue
                raise TrainerError(f"cannot list the containers: {exc}") from exc
            mine = [
                container for container in containers
                if container.labels.get(LABEL_JOBS_DIR) == str(jobs_dir)
                and container.labels.get(LABEL_STORE, None if engine.remote else store.store_id()) == store.store_id()
            ]  # fmt: skip
            existing.update(container.name for container in mine)
            for container in mine:
                if container.name in in_use or container.status not in ("created", "exited", "dead"):
                    continue  # running, paused or restarting: never touched
                try:
                    container.remove()
                    if engine.remote:  # the volume of its runs' files, if it is ours
                        self._remove_runs_volume(container, store)
                except engine_errors() as exc:  # the others are still tried
                    failed.append(f"{container.name} ({exc})")
                    continue
                shutil.rmtree(store.container_dir(container.name), ignore_errors=True)
                removed.append(container.name + (f" on {engine.label}" if engine.remote else ""))
        # the directories of containers removed some other way, that no job names any more (not one
        # made a moment ago for a container being created right now)
        try:
            leftover = [entry for entry in os.listdir(store.containers_dir) if entry not in existing and entry not in in_use]
        except OSError:
            leftover = []
        for name in leftover:
            path = store.containers_dir / name
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > ORPHAN_DIR_AGE:
                    shutil.rmtree(path, ignore_errors=True)
        if failed:
            done = f"removed containers {', '.join(removed)}; " if removed else ""
            raise TrainerError(f"{done}could not remove {'; '.join(failed)}")
        return removed

    # -- stopping ----------------------------------------------------------

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        import docker

        runtime = DockerRuntime.of(record)
        engine = self.engine_of(record)
        try:
            try:
                target = self.client_of(engine).containers.get(runtime.container_id)
            except docker.errors.NotFound:
                return
            if target.status == "running" and not record.status.is_final:
                self._stop_job(target, record, run_dir)
            if container:
                target.stop(timeout=STOP_GRACE_SECONDS)
        except engine_errors() as exc:
            raise self._engine_error(exc, "stop the job", engine) from exc

    def _stop_job(self, target, record: JobRecord, run_dir: Path) -> None:
        """Signal the supervisor and wait until the job has ended (TERM, then KILL after the grace period).
        Processes are found by what they run, in the container itself: the pid file is the job's to
        write, so it is never what decides whom to signal."""
        runtime = DockerRuntime.of(record)
        inner = runtime.run_dir
        found = job_processes(target, inner)
        deadline = time.monotonic() + 5
        while not found["supervisor"] and not found["job"] and time.monotonic() < deadline:
            if self._facts(target, record, run_dir).exit_code is not None:
                return  # it has ended
            time.sleep(0.1)  # submitted a moment ago: the supervisor may not run yet
            found = job_processes(target, inner)
        if found["supervisor"]:
            run_in(target, 'for pid in "$@"; do kill -TERM "$pid"; done', *found["supervisor"])
            # wait for it, so that stopping the container next never cuts the job's grace period short
            deadline = time.monotonic() + STOP_GRACE_SECONDS + 5
            while self._supervisor_running(target, runtime) and time.monotonic() < deadline:
                time.sleep(0.2)
        elif found["job"]:
            # no supervisor left to do it: the job's own process group, TERM then KILL
            run_in(target, STOP_GROUPS, str(STOP_GRACE_SECONDS), *found["job"])


class ContainerLogSource:
    """A log inside a container that does not mount the store, read through the engine
    (by exec while the container runs, from its file system once it has stopped)."""

    def __init__(self, backend: DockerBackend, engine: Engine, container_id: str, path: str):
        self.backend = backend
        self.engine = engine
        self.container_id = container_id
        self.path = path

    @contextlib.contextmanager
    def _container(self, purpose: str = "calls"):
        import docker

        try:
            yield self.backend.client_of(self.engine, purpose).containers.get(self.container_id)
        except docker.errors.NotFound:
            raise TrainerError(f"the log went with its container ({self.container_id[:12]} was removed)") from None
        except engine_errors() as exc:
            raise self.backend._engine_error(exc, "read the job's log", self.engine) from exc

    def size(self) -> int:
        with self._container() as container:
            if container.status != "running":
                return container_file_size(container, self.path)
            # a regular file only: a FIFO the job put in its place would block wc (and its exec) for good
            text = run_in(container, '[ -f "$1" ] && [ ! -L "$1" ] || { echo 0; exit; }; wc -c < "$1"', self.path, limit=64, whole=True).strip()
            if not (text.isdigit() and len(text) <= 18):
                raise RunFileError(f"cannot tell the size of the job's log in container {container.name}")
            return int(text)

    def read(self, offset: int, limit: int) -> bytes:
        with self._container() as container:
            if container.status != "running":
                return read_container_file(container, self.path, offset, limit)
            return run_in(container, '[ -f "$2" ] && [ ! -L "$2" ] || exit 0; tail -c +"$1" "$2" | head -c "$3"', str(offset + 1), self.path, str(limit), limit=limit, whole=True)

    def open_stream(self, first_byte: int):
        """An attached exec that streams the log from `first_byte` (1-based) as it grows, with a
        heartbeat on stderr (see streamed_log); None when the container does not run."""
        with self._container("streams") as container:
            if container.status != "running":
                return None
            api = container.client.api
            run_dir = self.path.rpartition("/")[0]  # the log is run_dir/output.log (see FOLLOW_LOG)
            command = ["sh", "-c", FOLLOW_LOG, "sh", str(first_byte), str(HEARTBEAT_SECONDS)]
            exec_id = api.exec_create(container.id, command, stdin=True, stdout=True, stderr=True, environment={"JT_RUN_DIR": run_dir})["Id"]
            return api.exec_start(exec_id, socket=True)


def give_stdin(stream, data: bytes) -> None:
    """Write `data` to an attached exec's stdin and close it: the process reads it, then EOF."""
    sock = getattr(stream, "_sock", stream)
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    finally:
        stream.close()
