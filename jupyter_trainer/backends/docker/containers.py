"""The containers jobs run in: found by name, or created with our labels, mounts and checks; the
run's files put where the container sees them; and the stopped ones a store made, removed.

Each container that jupyter_trainer creates mounts a directory of its own in the store, where
each of its runs' files (script, log, exit code) is a hard link to the run's files in the store:
they live on this machine and outlive the container, and a job sees its container's jobs only,
not the whole store. A container the user created is used as it is: the run's files are copied
into it and read back through the engine. On a remote host a container keeps its runs' files on
a volume of its own there.

Every function here is called inside `Clients.calling`, which words the engine's failures.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import tarfile
import time
from pathlib import Path, PurePosixPath

from ...core.files import make_private_dir
from ...core.store import JobStore
from ...errors import InvalidOption, TrainerError
from ...spec.job_spec import DetachedSpec
from . import store_mounts
from .errors import engine_errors, no_image, not_created
from .hosts import LOCAL_SOCKET, Engine
from .in_container import run_in, stops_on_term
from .lines_mount import HANDED_OUT, check_lines_mounted, gpus_label, handed_out_requests, lines_volumes
from .restarts import (
    KEEPER_VERSION,
    LABEL_KEEPER,
    RESTART_POLICY,
    check_can_restart,
    has_keeper,
    install_keeper,
    keeper_command,
)
from .runtime import MOUNTED_JOBS_DIR, RUN_FILES, SHIPPED_JOBS_DIR, WORKSPACE

LABEL = "jupyter_trainer"
LABEL_JOBS_DIR = "jupyter_trainer.jobs_dir"
LABEL_WORKDIR = "jupyter_trainer.workdir"
LABEL_GPUS = "jupyter_trainer.gpus"
LABEL_STORE = "jupyter_trainer.store"  # the store's id (JobStore.store_id): stores of the same path differ
LABEL_CONTAINER = "jupyter_trainer.container"  # on a volume we made: the container it was made for
LABEL_SCRATCH = "jupyter_trainer.scratch"  # a container made only to read a script through (when: Unix time)
SCRATCH_STALE_SECONDS = 600.0  # a scratch container this old was left by a read that was cut off
ORPHAN_DIR_AGE = 3600.0  # seconds: a store directory of no container is removed only once this old
COMPOSE_PROJECT = "com.docker.compose.project"


def default_container_name(image: str, workdir: str) -> str:
    """One container per image and working directory."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", image.rsplit("/", 1)[-1]).strip("-.")[:32] or "image"
    digest = hashlib.sha256(f"{image}\0{workdir}".encode()).hexdigest()[:8]
    return f"jt-{slug}-{digest}"


def container_name(
    container: str | None, image: str | None, workdir: str | None, engine: Engine, store: JobStore
) -> str:
    """The container a job runs in: the one it names, else one per image and working directory
    (on a remote host, where other laptops and users meet, one per store too)."""
    if container:
        return container
    return default_container_name(image or "", f"{workdir}\0{store.store_id()}" if engine.remote else workdir)


def containers_named_by(record, store: JobStore) -> set[str]:
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
    return {container_name(None, image, workdir, engine, store)}


def gpu_requests(gpus: str | None) -> list:
    if not gpus:
        return []
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if "," in gpus:
        return [DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


def is_ours(container) -> bool:
    return container.labels.get(LABEL) == "1"


def working_dir(container) -> str:
    """Where a job in the container runs, and --sync copies to: /workspace in ours, else the
    container's own working directory."""
    return WORKSPACE if is_ours(container) else container.attrs["Config"].get("WorkingDir") or "/"


# -- the job's container, running ----------------------------------------------------


def running_container(spec: DetachedSpec, jobs_dir: Path, client, engine: Engine, exec_seconds: float | None = None):
    """The job's container, running: found, or created, or started again. Under the store's
    containers lock (shared), so that a prune does not remove it between found and started.
    `exec_seconds`: how long a look inside it is awaited (see in_container.run_in)."""
    with JobStore(jobs_dir.parent).containers_lock(shared=True):
        return _running_container(spec, jobs_dir, client, engine, exec_seconds)


def _running_container(spec: DetachedSpec, jobs_dir: Path, client, engine: Engine, exec_seconds: float | None):
    import docker

    name = container_name(spec.options.container, spec.options.image, spec.workdir, engine, JobStore(jobs_dir.parent))
    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        if not spec.options.image:
            where = f" on {engine.label}" if engine.remote else ""
            raise InvalidOption(
                f"no container named {name!r}{where}", "pass --image IMAGE to create it, or name a running container"
            ) from None
        if engine.remote:
            container = _create_remote_container(name, spec, jobs_dir, client, engine)
        else:
            container = _create_container(name, spec, jobs_dir, client)
    if not engine.remote:  # a remote host cannot reach this machine's store, whatever it mounts
        _check_store_unreachable(container, jobs_dir)
    _check_gpus(container, spec)
    check_lines_mounted(container, spec, engine)
    check_can_restart(container, spec.options.restarts or 0)
    if container.status != "running":
        if not is_ours(container):
            raise InvalidOption(
                f"container {name!r} is {container.status}", f"start it (docker start {name}) or choose another"
            )
        if has_keeper(container):  # one being created by another process this moment may not have it yet
            install_keeper(container)
        container.start()
        container.reload()
    if spec.options.stop_container_when_done:
        _check_stops_on_term(container, exec_seconds)
    return container


def _check_stops_on_term(container, exec_seconds: float | None) -> None:
    """The supervisor stops the container from inside, with TERM to its PID 1. A PID 1 without a
    TERM handler never gets it (the kernel shields a namespace's init), so refuse at once
    rather than leave the GPUs held after the job."""
    if is_ours(container) or container.attrs["HostConfig"].get("Init"):
        return  # an init forwards TERM to the main process
    status = run_in(container, "cat /proc/1/status", limit=1 << 16, seconds=exec_seconds)
    if stops_on_term(status.decode(errors="replace")):
        return
    raise InvalidOption(
        f"--stop-container-when-done: container {container.name!r} cannot stop itself, its main process ignores TERM",
        f"start it with docker run --init, or drop the option and stop it afterwards with docker stop {container.name}",
    )


def _check_store_unreachable(container, jobs_dir: Path) -> None:
    """An existing container is reused as it is, unless it can reach the job store (see store_mounts)."""
    home = jobs_dir.parent
    attrs = container.attrs
    mounts = [
        store_mounts.Mount(mount["Source"], mount["Destination"])
        for mount in attrs.get("Mounts") or []
        if mount.get("Source") and mount.get("Destination")
    ]
    mounted_over = {mount.destination for mount in mounts} | set((attrs.get("HostConfig") or {}).get("Tmpfs") or {})
    own_dir = str(JobStore(home).container_dir(container.name)) if is_ours(container) else None
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
            f"remove it (docker rm -f {container.name}) and the next job creates a safe one, or use a container "
            f"that does not mount {home}",
        )


def _check_gpus(container, spec: DetachedSpec) -> None:
    """GPUs cannot be given to a container afterwards."""
    labels = container.labels
    if spec.gpus and is_ours(container) and labels.get(LABEL_GPUS, "") != gpus_label(spec):
        made_for = labels.get(LABEL_GPUS) or "none"
        made_for = "N (GPUs handed out)" if made_for == HANDED_OUT else made_for
        raise InvalidOption(
            f"container {container.name!r} was created with --gpus {made_for}, not {spec.gpus}",
            f"stop and remove it (docker rm -f {container.name}) or choose another --container",
        )


def _create_container(name: str, spec: DetachedSpec, jobs_dir: Path, client):
    home = jobs_dir.parent
    if store_mounts.is_inside(spec.workdir, str(home)):
        raise InvalidOption(
            f"--workdir {spec.workdir} is inside the job store ({home})", "choose a directory outside it"
        )
    ensure_image(spec.options.image, client)
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
    tmpfs = {cover: "ro,size=4k,mode=0500" for cover in needed.covers}
    return _run_container(client, name, spec, jobs_dir, volumes, tmpfs=tmpfs, engine=Engine(LOCAL_SOCKET))


def _create_remote_container(name: str, spec: DetachedSpec, jobs_dir: Path, client, engine: Engine):
    """A container on another machine: its workdir is a directory there (--workdir) or a volume
    of its own, and its runs' files are kept on a volume of its own there, so that they outlive
    both the container and the laptop that started the job."""
    ensure_image(spec.options.image, client)
    workspace = spec.workdir or f"{name}-workspace"
    volumes = {
        workspace: {"bind": WORKSPACE, "mode": "rw"},
        _runs_volume(client, name, engine, JobStore(jobs_dir.parent)): {"bind": SHIPPED_JOBS_DIR, "mode": "rw"},
    }
    return _run_container(client, name, spec, jobs_dir, volumes, tmpfs={}, engine=engine)


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
            f"(someone's own, or left by an older version), so container {container_name!r} cannot keep its runs' "
            "files there",
            f"choose another --container, or remove that volume if nothing in it is needed (docker volume rm {name})",
        )
    return name


def _run_container(client, name: str, spec: DetachedSpec, jobs_dir: Path, volumes: dict, tmpfs: dict, engine: Engine):
    import docker

    in_line, line_labels = lines_volumes(spec, engine)  # a job that waits its turn: its machine's lines
    devices = handed_out_requests(spec, client) if gpus_label(spec) == HANDED_OUT else gpu_requests(spec.gpus)
    try:
        container = client.containers.create(
            spec.options.image,
            keeper_command(),
            name=name,
            init=True,  # reaps what ends in it; passes TERM (or a job's USR1, see keeper.sh) on to the keeper
            restart_policy=RESTART_POLICY,
            working_dir=WORKSPACE,
            volumes={**volumes, **in_line},
            labels={
                LABEL: "1",
                LABEL_JOBS_DIR: str(jobs_dir),
                LABEL_STORE: JobStore(jobs_dir.parent).store_id(),
                LABEL_WORKDIR: spec.workdir,
                LABEL_GPUS: gpus_label(spec),
                LABEL_KEEPER: KEEPER_VERSION,
                **line_labels,
            },
            tmpfs=tmpfs,
            # a job's --notify URL on the engine's machine is reachable from inside as host.docker.internal
            extra_hosts={"host.docker.internal": "host-gateway"},
            device_requests=devices,
        )
        install_keeper(container)  # into its own file system, before its main process is started
        container.start()
        return client.containers.get(container.id)
    except docker.errors.APIError as exc:
        if exc.status_code == 409:  # another process is creating it this moment
            return _wait_for_container(name, client)
        _remove_unstarted(client, name, jobs_dir)
        raise not_created(name, exc, spec.gpus) from exc


def _remove_unstarted(client, name: str, jobs_dir: Path) -> None:
    """A container created but not started (a mount its engine refused, say) is no use to anyone."""
    with contextlib.suppress(*engine_errors()):
        container = client.containers.get(name)
        if container.status == "created" and container.labels.get(LABEL_JOBS_DIR) == str(jobs_dir):
            container.remove(force=True)


def _wait_for_container(name: str, client, timeout: float = 30.0):
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


def ensure_image(image: str, client) -> None:
    import docker

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(image)
    except docker.errors.DockerException as exc:
        raise no_image(image, exc) from exc


# -- the run's files where the container sees them ------------------------------------------


def store_mount(container, jobs_dir: Path) -> Path | None:
    """The container's own directory in this store, where it sees its runs' files; None for a
    container that mounts nothing of this store."""
    source = next(
        (
            mount.get("Source", "")
            for mount in container.attrs.get("Mounts", [])
            if mount.get("Destination") == MOUNTED_JOBS_DIR
        ),
        None,
    )
    if source is None:
        return None
    source = Path(os.path.realpath(source))
    if source.parent == Path(os.path.realpath(JobStore(jobs_dir.parent).containers_dir)):
        return source
    return None  # another store's container


def ship(container, run_dir: Path, inner_run_dir: str, files: tuple[str, ...] = RUN_FILES) -> None:
    """Copy the run's files into a container that does not mount the store."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        parts = PurePosixPath(inner_run_dir).parts[1:]
        for depth in range(1, len(parts) + 1):  # the directories, so that they exist
            info = tarfile.TarInfo("/".join(parts[:depth]))
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for name in files:
            tar.add(run_dir / name, arcname="/".join((*parts, name)))
    container.put_archive("/", archive.getvalue())


# -- removing ----------------------------------------------------------------------------


def removable(containers: list, jobs_dir: Path, store: JobStore, engine: Engine) -> list:
    """Of the containers labelled ours on an engine, those this store created (jobs' containers,
    and scratch ones a script was read through)."""
    return [
        container for container in containers
        if container.labels.get(LABEL_JOBS_DIR) == str(jobs_dir)
        and container.labels.get(LABEL_STORE, None if engine.remote else store.store_id()) == store.store_id()
    ]  # fmt: skip


def remove_stale_scratch(client, store: JobStore) -> None:
    """This store's scratch containers that a read cut off left behind (never started, they are
    never auto-removed); not one a read of this moment goes through. Best effort: a prune removes
    the rest."""
    mine = {"label": [f"{LABEL_SCRATCH}", f"{LABEL_STORE}={store.store_id()}", f"{LABEL_JOBS_DIR}={store.jobs_dir}"]}
    with contextlib.suppress(*engine_errors()):
        for container in client.containers.list(all=True, filters=mine, ignore_removed=True):
            made = container.labels.get(LABEL_SCRATCH, "")
            if made.isdigit() and time.time() - int(made) > SCRATCH_STALE_SECONDS:
                container.remove(force=True)


def remove_runs_volume(container, store: JobStore) -> None:
    """Remove the volume a removed remote container kept its runs' files on, if it is the one we
    made for it for this store; a user's volume mounted there (or one made before volumes were
    labelled) stays. Its workspace volume holds the user's work, and stays too."""
    mounted = next(
        (
            mount.get("Name")
            for mount in container.attrs.get("Mounts") or []
            if mount.get("Type") == "volume" and mount.get("Destination") == SHIPPED_JOBS_DIR
        ),
        None,
    )
    if not mounted:
        return
    with contextlib.suppress(*engine_errors()):  # gone already, or used by another container
        volume = container.client.volumes.get(mounted)
        labels = volume.attrs.get("Labels") or {}
        if (
            labels.get(LABEL) == "1"
            and labels.get(LABEL_CONTAINER) == container.name
            and labels.get(LABEL_STORE) == store.store_id()
        ):
            volume.remove()


def remove_orphan_dirs(store: JobStore, existing: set[str], in_use: set[str]) -> None:
    """The store's directories of containers removed some other way, that no job names any more
    (not one made a moment ago for a container being created right now)."""
    try:
        leftover = [
            entry for entry in os.listdir(store.containers_dir) if entry not in existing and entry not in in_use
        ]
    except OSError:
        return
    for name in leftover:
        path = store.containers_dir / name
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > ORPHAN_DIR_AGE:
                shutil.rmtree(path, ignore_errors=True)


def remove_compose_project(project: str, timeout: float = 8.0) -> None:
    """Remove the containers of a docker-compose project on this machine's engine (SageMaker local
    mode's training containers). Whoever stops compose may be removing the same containers: wait
    until every one is gone, `timeout` seconds at most (then TimeoutError)."""
    import docker

    client = docker.from_env()
    try:
        deadline = time.monotonic() + timeout
        while True:
            left = client.containers.list(
                all=True, filters={"label": f"{COMPOSE_PROJECT}={project}"}, ignore_removed=True
            )
            if not left:
                return
            for container in left:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):  # being removed already
                    container.remove(force=True)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(c.name for c in left)} still there after {timeout:.0f} s")
            time.sleep(0.2)
    finally:
        client.close()
