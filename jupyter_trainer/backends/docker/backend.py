"""The Docker backend: the job's supervisor runs in a persistent container through a detached exec.

Which container, and how it is made, is containers.py; every call to an engine goes through
`Clients.calling` (clients.py), which words its failures (errors.py)."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from ...core.files import create_private_file, write_in_place
from ...core.record import JobRecord, Observation, Status
from ...core.resources import Usage
from ...core.store import JobStore
from ...errors import BackendUnavailable, CorruptRecord, InvalidOption, TrainerError
from ...spec.job_spec import DetachedSpec
from ..base import (
    LOG_FILE,
    STOP_GRACE_SECONDS,
    SUPERVISOR_FILE,
    BackendBase,
    FileLogSource,
    SupervisorFacts,
    job_command,
    job_environment,
    notify_input,
    prepare_supervised_run,
    read_supervisor_facts,
    write_launch_target,
)
from . import containers
from .clients import Clients, remember_engine, used_engines
from .declared import NO_RESTART_FILE, RESTART_FILE, RESTARTS_FILE
from .errors import LIST, LOOK, REACH, REMOVE, START, STOP, changed_under_the_look, exec_began_after_all
from .hosts import LOCAL_SOCKET, Engine, resolve
from .in_container import (
    EXEC_SECONDS,
    STOP_GROUPS,
    give_stdin,
    job_processes,
    run_in,
)
from .lines_mount import check_offered, observed_turn, prepare_line, waiting_job
from .links import link_run, unlink_run
from .log_source import ContainerLogSource, SharedStreams
from .remote_script import lies_on_host, with_script_read
from .restart_looks import follow_restarts, may_come_back
from .restarts import (
    forbid_restart,
    forget_instructions,
    has_keeper,
    instructions,
    stop_container,
    why_it_restarted,
)  # fmt: skip
from .runtime import MOUNTED_JOBS_DIR, RUN_FILES, SHIPPED_JOBS_DIR, TURN_FILES, WORKSPACE, DockerRuntime
from .script_place import check_reachable, in_both_places, script_in_container, sent_alone, sent_alone_fact
from .supervised import exec_outcome, still_supervised, supervisor_facts, supervisor_running
from .sync import sync_directory
from .usage import ContainerUsage

PING_VALID_SECONDS = 5.0  # an engine that answered this recently is not asked again before a submission
# looks at a job whose container changes state under each of them, before its status is kept as it is
LOOKS_WHILE_CHANGING = 3


class DockerBackend(BackendBase):
    name = "docker"
    status_interval = 2.0  # seconds between two status checks by a widget
    usage_outlives_the_job = False
    starts_at_launch = True
    has_containers = True

    def __init__(self, exec_seconds: float = EXEC_SECONDS):
        self.clients = Clients()
        # how long an answer from inside a container is awaited (a job may hang its tools)
        self.exec_seconds = exec_seconds
        self._pinged: dict[str, float] = {}
        self._usage = ContainerUsage()
        self._streams = SharedStreams()

    # -- the engine --------------------------------------------------------

    def engine_of(self, record: JobRecord) -> Engine:
        """The engine the job runs on, as its record names it (never the reader's DOCKER_HOST). A
        record from before engines were recorded names none: the engine the environment chooses."""
        return (
            Engine.of(record.runtime.get("engine")) or Engine.of(record.options.get("engine")) or self._default_engine()
        )

    @staticmethod
    def _spec_engine(spec: DetachedSpec) -> Engine:
        """The engine a new job runs on: the one its cell chose (none: the local socket)."""
        return Engine.of(spec.options.engine) or Engine(LOCAL_SOCKET)

    @staticmethod
    def _default_engine() -> Engine:
        try:
            return resolve(None)
        except InvalidOption as exc:  # a DOCKER_CONTEXT that names nothing
            raise BackendUnavailable(str(exc)) from None

    # -- launching ---------------------------------------------------------

    def preflight(self, spec: DetachedSpec, store: JobStore) -> DetachedSpec | None:
        engine = self._spec_engine(spec)
        check_reachable(spec, engine)
        check_offered(spec, engine)  # --gpus N: no more than the engine's machine offers
        if spec.script_on_host:  # its text, read there, is what the job is
            with self.clients.calling(engine, REACH) as client:
                return with_script_read(spec, client, engine, store)
        if spec.also_on_host and sent_alone(spec, engine):
            with self.clients.calling(engine, REACH) as client:
                if lies_on_host(spec, spec.also_on_host, client, engine, store):
                    raise in_both_places(spec, engine)
        if time.monotonic() - self._pinged.get(engine.url, float("-inf")) < PING_VALID_SECONDS:
            return None
        with self.clients.calling(engine, REACH) as client:
            client.ping()
        self._pinged[engine.url] = time.monotonic()
        return None

    def prepare(self, run_dir: Path, spec: DetachedSpec) -> None:
        prepare_supervised_run(run_dir, spec.script, spec.from_cell)
        for name in (RESTART_FILE, RESTARTS_FILE, NO_RESTART_FILE):  # see restarts.py; written into in place
            create_private_file(run_dir / name)

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> DockerRuntime:
        engine = self._spec_engine(spec)
        with self.clients.calling(engine, START) as client:
            return self._start(record, run_dir, spec, engine, client)

    def _start(self, record: JobRecord, run_dir: Path, spec: DetachedSpec, engine: Engine, client) -> DockerRuntime:
        jobs_dir = run_dir.parent.parent
        if engine.remote:
            remember_engine(jobs_dir.parent, engine)
        container = containers.running_container(spec, jobs_dir, client, engine, self.exec_seconds)
        working_dir = containers.working_dir(container)
        write_launch_target(run_dir, spec, working_dir, record.name, script_in_container(spec, engine, container))
        relative = f"{record.name}/{record.run}"
        restarts = spec.options.restarts or 0
        # the run's files, its waiter's with them where it waits its turn
        files = prepare_line(record, run_dir, spec, engine)
        # a remote engine's containers cannot see this machine's store: the files are copied in
        shared_dir = None if engine.remote else containers.store_mount(container, jobs_dir)
        if shared_dir is not None and not link_run(shared_dir, record.name, record.run, run_dir, files):
            shared_dir = None  # no hard links here: copy the files in instead
        if shared_dir is not None:
            inner_run_dir = f"{MOUNTED_JOBS_DIR}/{relative}"
        else:
            # several stores (users, JUPYTER_TRAINER_HOMEs) may share a container: one directory each
            store_id = JobStore(jobs_dir.parent).store_id()
            inner_run_dir = f"{SHIPPED_JOBS_DIR}/{store_id}/{relative}"
        ours = containers.is_ours(container)
        command = [
            "sh", f"{inner_run_dir}/{SUPERVISOR_FILE}", inner_run_dir, str(STOP_GRACE_SECONDS),
            ("2" if has_keeper(container) else "1") if spec.options.stop_container_when_done else "0",
            *waiting_job(spec, job_command(spec, inner_run_dir), inner_run_dir),
        ]  # fmt: skip
        given = notify_input(record, run_dir, spec.notify)
        if restarts:  # what the container's keeper needs to start the job again as its exec does now
            with JobStore.of_run(run_dir).writing():  # a full store: one line
                write_in_place(
                    run_dir / RESTART_FILE, instructions(restarts, command, job_environment(spec), WORKSPACE, given)
                )
        if shared_dir is None:
            containers.ship(container, run_dir, inner_run_dir, files)
        sync_facts = None
        if spec.options.sync:
            sync_facts = sync_directory(container, spec.options.sync, working_dir, jobs_dir.parent)
        if sent_alone(spec, engine):
            sync_facts = [*(sync_facts or []), sent_alone_fact(spec, engine)]
        exec_id = None
        try:
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
        except BaseException as exc:
            if given or not exec_began_after_all(client, exec_id, exc):
                if shared_dir is not None:
                    unlink_run(shared_dir, record.name, record.run, files)  # the store discards the run
                raise
        return DockerRuntime(
            container_id=container.id,
            container_name=container.name,
            image_id=container.attrs.get("Image"),
            container_started_at=container.attrs["State"]["StartedAt"],
            exec_id=exec_id,
            run_dir=inner_run_dir,
            mounted=shared_dir is not None,
            shared_dir=shared_dir.name if shared_dir is not None else None,
            engine=engine.to_dict(),
            sync_facts=sync_facts or None,
            restarts_allowed=restarts or None,
        )

    # -- following ---------------------------------------------------------

    def asking(self, record: JobRecord) -> str:
        """Every look is a call to an engine, which may be another machine's (over SSH), or a busy one."""
        engine = Engine.of(record.runtime.get("engine")) or Engine.of(record.options.get("engine"))
        if engine is not None and engine.remote:
            # its thread shares the host's SSH sessions with the poller's calls and the log streams,
            # within what its sshd allows (clients.py, sessions.py)
            return f"asking the Docker engine on {engine.label}…"
        return "asking the Docker engine…"

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        """What the engine shows of the job. An engine that does not answer says nothing of the
        job, which keeps its status (see job._observe), with the words of errors.translate; nor
        does a container that keeps changing state under the look (stopping, restarting, paused:
        the engine refuses a look inside it that its inspect a moment before allowed)."""
        for _ in range(LOOKS_WHILE_CHANGING):
            try:
                return observed_turn(self._look(record, run_dir), record, run_dir, self.clients, self.engine_of)
            except TrainerError as error:
                if not changed_under_the_look(error.__cause__):
                    raise
            time.sleep(0.2)
        return Observation(alive=None)

    def _look(self, record: JobRecord, run_dir: Path) -> Observation:
        import docker

        runtime = DockerRuntime.of(record)
        engine = self.engine_of(record)
        label = runtime.container_name + (f" on {engine.label}" if engine.remote else "")
        with self.clients.calling(engine, LOOK) as client:
            if not runtime.mounted and record.status is Status.RUNNING and still_supervised(client, runtime):
                # one request, not five: the supervisor's exec runs, so the container runs as it did
                # when the job started (a restart ends its execs) and the job has not ended (the
                # supervisor writes its exit code, then ends). Its files are read once it has ended.
                return Observation(alive=True, started=True)
            try:
                container = client.containers.get(runtime.container_id)
            except docker.errors.NotFound:
                facts = read_supervisor_facts(run_dir) if runtime.mounted else SupervisorFacts()
                self.release(record, run_dir)
                if facts.exit_code is not None:
                    return facts.ended()
                return Observation(alive=False, why_gone=f"container {label} was removed while the job ran")
            state = container.attrs["State"]
            restarted = state.get("StartedAt") != runtime.container_started_at
            if runtime.restarts_allowed and (restarted or runtime.restarts):
                seen = follow_restarts(client, container, runtime, run_dir, label, restarted, self.exec_seconds)
                if seen is not None:
                    if seen.alive is False:
                        self.release(record, run_dir, container)
                    return seen
            supervised = state.get("Running") and not restarted and supervisor_running(container, runtime)
            facts = supervisor_facts(container, runtime, run_dir)  # read after the liveness check: no race
            if (
                not supervised
                and facts.exit_code is None
                and not facts.problem
                and may_come_back(client, container, runtime, run_dir)
            ):
                # its container is on its way up, and its keeper will start it again
                return Observation(alive=True, started=True)
            # the supervisor was killed but the job goes on, whatever its files say
            orphaned = (
                state.get("Running") and not restarted and not supervised
                and bool(job_processes(container, runtime.run_dir, self.exec_seconds)["job"])
            )  # fmt: skip
            # why the job is gone, while the engine can still be asked what happened to its container
            gone = not supervised and not orphaned and facts.exit_code is None and not facts.problem
            why_stopped = (
                why_it_restarted(
                    client, container, runtime.container_started_at, started_again=bool(state.get("Running"))
                )
                if gone and (restarted or not state.get("Running"))
                else ""
            )
        if orphaned:  # it can no longer record its exit code
            return Observation(alive=True, started=True)
        # the job can write it too: it counts once the supervisor is gone
        if facts.exit_code is not None and not supervised:
            self.release(record, run_dir, container)
            return facts.ended()
        if facts.problem:
            if not supervised:
                self.release(record, run_dir, container)
            return facts.unknown(bool(supervised))
        if supervised:
            return Observation(alive=True, started=facts.job_pid is not None)
        self.release(record, run_dir, container)
        if not state.get("Running"):
            why = f"{why_stopped} (container {label}, exit code {state.get('ExitCode')})"
        elif restarted:
            why = f"{why_stopped} (container {label}); the job was run without --restarts"
        else:
            why = "the job's supervisor process ended without recording an exit code" + exec_outcome(
                container, runtime.exec_id
            )
        return Observation(alive=False, why_gone=why)

    def release(self, record: JobRecord, run_dir: Path, container=None) -> None:
        """The job has ended: its files need no longer be in its container's directory (nor, with
        --restarts, what its `restart` file held: in the store, and in `container` where given)."""
        runtime = DockerRuntime.of(record)
        if runtime.restarts_allowed:  # the environment and --notify input it held are needed no more
            with contextlib.suppress(OSError):
                write_in_place(run_dir / RESTART_FILE, b"")
            if container is not None:
                forget_instructions(container, runtime)
        shared = runtime.shared_dir  # a name in this store's containers/, nothing else
        if shared is not None:
            unlink_run(JobStore.of_run(run_dir).container_dir(shared), record.name, record.run, RUN_FILES + TURN_FILES)

    def log_source(self, record: JobRecord, run_dir: Path):
        if not record.runtime:  # not launched yet
            return FileLogSource(run_dir / LOG_FILE)
        runtime = DockerRuntime.of(record)
        if runtime.mounted:
            return FileLogSource(run_dir / LOG_FILE)
        engine = self.engine_of(record)
        source = ContainerLogSource(self.clients, engine, runtime.container_id, runtime.run_dir, self.exec_seconds)
        return self._streams.of(source, record.created_at) if engine.remote else source

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
            if not record.runtime:
                return []
            return [*(DockerRuntime.of(record).sync_facts or []), *self._restart_facts(record)]
        except CorruptRecord:
            return []

    @staticmethod
    def _restart_facts(record: JobRecord) -> list[str]:
        """Each start again and why it was needed; for a job run with --restarts, that none was."""
        runtime = DockerRuntime.of(record)
        if not runtime.restarts_allowed:
            return []
        causes = runtime.restart_causes or []
        shown = [f"restart {number} of {runtime.restarts_allowed}: {cause}" for number, cause in enumerate(causes, 1)]
        return shown or [
            f"--restarts {runtime.restarts_allowed}: none needed{'' if record.status.is_final else ' so far'}"
        ]

    def status_fields(self, record: JobRecord) -> dict:
        """What `status --json` says of a Docker job besides the common fields: how often it was
        started again (0 without --restarts)."""
        try:
            runtime = DockerRuntime.of(record) if record.runtime else None
        except CorruptRecord:
            runtime = None
        turn = super().status_fields(record)  # the GPUs it took in line, or its place there
        if runtime is None:
            return {**turn, "restarts": 0}
        # the image it runs, as docker image inspect gives its id
        image = {"image_id": runtime.image_id} if runtime.image_id else {}
        return {
            **turn,
            **image,
            "restarts": runtime.restarts or 0,
            **({"restarts_allowed": runtime.restarts_allowed} if runtime.restarts_allowed else {}),
        }

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return []  # what it left stays in its container, which `stop --container` ends

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        """The container's use, and its GPUs (see usage.py); None when it cannot be had."""
        if not record.runtime:
            return None
        try:
            with self.clients.calling(self.engine_of(record), LOOK) as client:
                return self._usage.of(client.containers.get(DockerRuntime.of(record).container_id))
        except Exception:  # the stats of a container a job controls: never worth a failure of the view
            return None

    # -- containers --------------------------------------------------------

    def containers_named_by(self, record: JobRecord, store: JobStore) -> set[str]:
        return containers.containers_named_by(record, store)

    def remove_unused_containers(self, store: JobStore, records: list[JobRecord]) -> list[str]:
        """`prune --containers`: the stopped containers the store's jobs ran in (on every engine it
        used) that none of its remaining Docker records (`records`) names."""
        in_use: set[str] = set()
        for record in records:
            in_use |= containers.containers_named_by(record, store)
        return self.remove_stopped_containers(store.jobs_dir, in_use)

    def remove_stopped_containers(self, jobs_dir: Path, in_use: set[str]) -> list[str]:
        """Remove the containers this store created, on this machine's engine and on every remote
        host it has used, that are not running and that no remaining job names (with their
        directories in the store, or on a remote host the volume of their runs' files); their names.
        A host that cannot be reached is named in the error, after the others were done."""
        store = JobStore(jobs_dir.parent)
        removed, failed, existing = [], [], set()
        for engine in [Engine(LOCAL_SOCKET), *used_engines(store.home)]:
            try:
                with self.clients.calling(engine, LIST) as client:
                    listed = client.containers.list(
                        all=True, filters={"label": f"{containers.LABEL}=1"}, ignore_removed=True
                    )
            except TrainerError as error:
                if engine.remote:
                    failed.append(f"the containers on {engine.label} ({error.message})")
                    continue
                raise
            mine = containers.removable(listed, jobs_dir, store, engine)
            existing.update(container.name for container in mine)
            for container in mine:
                if container.name in in_use or container.status not in ("created", "exited", "dead"):
                    continue  # running, paused or restarting: never touched
                try:
                    with self.clients.calling(engine, REMOVE):
                        container.remove()
                        if engine.remote:  # the volume of its runs' files, if it is ours
                            containers.remove_runs_volume(container, store)
                except TrainerError as error:  # the others are still tried
                    failed.append(f"{container.name} ({error.message})")
                    continue
                shutil.rmtree(store.container_dir(container.name), ignore_errors=True)
                removed.append(container.name + (f" on {engine.label}" if engine.remote else ""))
        containers.remove_orphan_dirs(store, existing, in_use)
        if failed:
            done = f"removed containers {', '.join(removed)}; " if removed else ""
            raise TrainerError(f"{done}could not remove {'; '.join(failed)}")
        return removed

    # -- stopping ----------------------------------------------------------

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        import docker

        runtime = DockerRuntime.of(record)
        if runtime.restarts_allowed and runtime.mounted and not record.status.is_final:
            # first, and without the engine, which may be down: it could start the container
            # again, and its keeper the job, before a stop reaches it
            forbid_restart(None, runtime, run_dir)
        with self.clients.calling(self.engine_of(record), STOP) as client:
            try:
                target = client.containers.get(runtime.container_id)
            except docker.errors.NotFound:
                return
            if runtime.restarts_allowed and not runtime.mounted and not record.status.is_final:
                forbid_restart(target, runtime, run_dir)  # first: its container may be down, and back before the stop
            if target.status == "running" and not record.status.is_final:
                self._stop_job(target, runtime, run_dir)
            if container:
                stop_container(target, STOP_GRACE_SECONDS)

    def _stop_job(self, target, runtime: DockerRuntime, run_dir: Path) -> None:
        """Signal the supervisor and wait until the job has ended (TERM, then KILL after the grace period).
        Processes are found by what they run, in the container itself: the pid file is the job's to
        write, so it is never what decides whom to signal."""
        inner = runtime.run_dir
        found = job_processes(target, inner, self.exec_seconds)
        deadline = time.monotonic() + 5
        while not found["supervisor"] and not found["job"] and time.monotonic() < deadline:
            if supervisor_facts(target, runtime, run_dir).exit_code is not None:
                return  # it has ended
            time.sleep(0.1)  # submitted a moment ago: the supervisor may not run yet
            found = job_processes(target, inner, self.exec_seconds)
        if found["supervisor"]:
            run_in(
                target, 'for pid in "$@"; do kill -TERM "$pid"; done', *found["supervisor"], seconds=self.exec_seconds
            )
            # wait for it, so that stopping the container next never cuts the job's grace period short
            deadline = time.monotonic() + STOP_GRACE_SECONDS + 5
            while supervisor_running(target, runtime) and time.monotonic() < deadline:
                time.sleep(0.2)
        elif found["job"]:
            # no supervisor left to do it: the job's own process group, TERM then KILL
            run_in(
                target,
                STOP_GROUPS,
                str(STOP_GRACE_SECONDS),
                *found["job"],
                seconds=self.exec_seconds + STOP_GRACE_SECONDS,
            )
