"""The Docker backend: the job's supervisor runs in a persistent container through a detached exec.

Which container, and how it is made, is containers.py; every call to an engine goes through
`Clients.calling` (clients.py), which words its failures (errors.py).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from ...errors import BackendUnavailable, CorruptRecord, InvalidOption, TrainerError
from ...jobs import JobRecord, Observation, Status
from ...resources import Usage
from ...spec import DetachedSpec
from ...store import JobStore
from ..base import (
    EXIT_CODE_FILE,
    LOG_FILE,
    PID_FILE,
    RUN_FILE_LIMIT,
    STOP_GRACE_SECONDS,
    SUPERVISOR_FILE,
    FileLogSource,
    SupervisorFacts,
    job_command,
    job_environment,
    notify_input,
    prepare_supervised_run,
    read_supervisor_facts,
)
from . import containers
from .clients import Clients, remember_engine, used_engines
from .errors import LIST, LOOK, REACH, REMOVE, START, STOP, engine_errors
from .hosts import LOCAL_SOCKET, Engine, resolve
from .in_container import EXEC_SECONDS, STOP_GROUPS, container_file, give_stdin, job_processes, read_container_file, run_in, runs_supervisor
from .links import link_run, unlink_run
from .log_source import ContainerLogSource, SharedStreams
from .remote_script import lies_on_host, with_script_read
from .script_place import check_reachable, in_both_places, script_in_container, sent_alone, sent_alone_fact
from .runtime import MOUNTED_JOBS_DIR, RUN_FILES, SHIPPED_JOBS_DIR, WORKSPACE, DockerRuntime
from .sync import sync_directory
from .usage import ContainerUsage

PING_VALID_SECONDS = 5.0  # an engine that answered this recently is not asked again before a submission


class DockerBackend:
    name = "docker"
    status_interval = 2.0  # seconds between two status checks by a widget
    usage_outlives_the_job = False
    has_containers = True

    def __init__(self, exec_seconds: float = EXEC_SECONDS):
        self.clients = Clients()
        self.exec_seconds = exec_seconds  # how long an answer from inside a container is awaited (a job may hang its tools)
        self._pinged: dict[str, float] = {}
        self._usage = ContainerUsage()
        self._streams = SharedStreams()

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

    # -- launching ---------------------------------------------------------

    def preflight(self, spec: DetachedSpec, store: JobStore) -> DetachedSpec | None:
        engine = self._spec_engine(spec)
        check_reachable(spec, engine)
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

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> DockerRuntime:
        engine = self._spec_engine(spec)
        with self.clients.calling(engine, START) as client:
            return self._start(record, run_dir, spec, engine, client)

    def _start(self, record: JobRecord, run_dir: Path, spec: DetachedSpec, engine: Engine, client) -> DockerRuntime:
        jobs_dir = run_dir.parent.parent
        if engine.remote:
            remember_engine(jobs_dir.parent, engine)
        container = containers.running_container(spec, jobs_dir, client, engine, self.exec_seconds)
        script_in_job = script_in_container(spec, engine, container)
        relative = f"{record.name}/{record.run}"
        # a remote engine's containers cannot see this machine's store: the files are copied in
        shared_dir = None if engine.remote else containers.store_mount(container, jobs_dir)
        if shared_dir is not None and not link_run(shared_dir, record.name, record.run, run_dir, RUN_FILES):
            shared_dir = None  # no hard links here: copy the files in instead
        if shared_dir is not None:
            inner_run_dir = f"{MOUNTED_JOBS_DIR}/{relative}"
        else:
            # several stores (users, JUPYTER_TRAINER_HOMEs) may share a container: one directory each
            store_id = JobStore(jobs_dir.parent).store_id()
            inner_run_dir = f"{SHIPPED_JOBS_DIR}/{store_id}/{relative}"
            containers.ship(container, run_dir, inner_run_dir)
        ours = containers.is_ours(container)
        working_dir = containers.working_dir(container)
        sync_facts = None
        if spec.sync:
            sync_facts = sync_directory(container, spec.sync, working_dir, jobs_dir.parent)
        if sent_alone(spec, engine):
            sync_facts = [*(sync_facts or []), sent_alone_fact(spec, engine)]
        command = [
            "sh", f"{inner_run_dir}/{SUPERVISOR_FILE}", inner_run_dir, str(STOP_GRACE_SECONDS),
            "1" if spec.stop_container_when_done else "0",
            *job_command(spec, inner_run_dir, working_dir, record.name, script_in_job),
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

    # -- following ---------------------------------------------------------

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        """What the engine shows of the job. An engine that does not answer says nothing of the
        job, which keeps its status (see Job._observe), with the words of errors.translate."""
        import docker

        runtime = DockerRuntime.of(record)
        engine = self.engine_of(record)
        label = runtime.container_name + (f" on {engine.label}" if engine.remote else "")
        with self.clients.calling(engine, LOOK) as client:
            if not runtime.mounted and record.status is Status.RUNNING and self._still_supervised(client, runtime):
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
            supervised = state.get("Running") and not restarted and self._supervisor_running(container, runtime)
            facts = self._facts(container, runtime, run_dir)  # read after the liveness check: no race
            # the supervisor was killed but the job goes on, whatever its files say
            orphaned = (
                state.get("Running") and not restarted and not supervised
                and bool(job_processes(container, runtime.run_dir, self.exec_seconds)["job"])
            )  # fmt: skip
        if orphaned:  # it can no longer record its exit code
            return Observation(alive=True, started=True)
        if facts.exit_code is not None and not supervised:  # the job can write it too: it counts once the supervisor is gone
            self.release(record, run_dir)
            return facts.ended()
        if facts.problem:
            if not supervised:
                self.release(record, run_dir)
            return facts.unknown(bool(supervised))
        if supervised:
            return Observation(alive=True, started=facts.job_pid is not None)
        self.release(record, run_dir)
        if not state.get("Running"):
            why = f"container {label} stopped (exit code {state.get('ExitCode')}) while the job ran"
        elif restarted:
            why = f"container {label} restarted while the job ran; its processes did not survive"
        else:
            why = "the job's supervisor process ended without recording an exit code" + self._exec_outcome(container, runtime.exec_id)
        return Observation(alive=False, why_gone=why)

    @staticmethod
    def _still_supervised(client, runtime: DockerRuntime) -> bool:
        import docker

        try:
            return bool(client.api.exec_inspect(runtime.exec_id).get("Running"))
        except docker.errors.NotFound:
            return False  # the engine restarted and forgot its execs: the long way

    def release(self, record: JobRecord, run_dir: Path) -> None:
        """The job has ended: its files need no longer be in its container's directory."""
        shared = DockerRuntime.of(record).shared_dir  # a name in this store's containers/, nothing else
        if shared is not None:
            unlink_run(JobStore.of_run(run_dir).container_dir(shared), record.name, record.run, RUN_FILES)

    @staticmethod
    def _exec_outcome(container, exec_id: str) -> str:
        """How the supervisor's exec ended, in words, when the engine still knows."""
        try:
            code = container.client.api.exec_inspect(exec_id).get("ExitCode")
        except engine_errors():
            return " (was it killed?)"
        if code in (None, 0, 137, 143):
            return " (was it killed?)"
        return f" (it exited with code {code}: can the container's user read and write the store's files?)"

    @staticmethod
    def _supervisor_running(container, runtime: DockerRuntime) -> bool:
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

    @staticmethod
    def _facts(container, runtime: DockerRuntime, run_dir: Path) -> SupervisorFacts:
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
        source = ContainerLogSource(self.clients, engine, runtime.container_id, runtime.run_dir, self.exec_seconds)
        return self._streams.of(source) if engine.remote else source

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
                    listed = client.containers.list(all=True, filters={"label": f"{containers.LABEL}=1"})
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
        with self.clients.calling(self.engine_of(record), STOP) as client:
            try:
                target = client.containers.get(runtime.container_id)
            except docker.errors.NotFound:
                return
            if target.status == "running" and not record.status.is_final:
                self._stop_job(target, runtime, run_dir)
            if container:
                target.stop(timeout=STOP_GRACE_SECONDS)

    def _stop_job(self, target, runtime: DockerRuntime, run_dir: Path) -> None:
        """Signal the supervisor and wait until the job has ended (TERM, then KILL after the grace period).
        Processes are found by what they run, in the container itself: the pid file is the job's to
        write, so it is never what decides whom to signal."""
        inner = runtime.run_dir
        found = job_processes(target, inner, self.exec_seconds)
        deadline = time.monotonic() + 5
        while not found["supervisor"] and not found["job"] and time.monotonic() < deadline:
            if self._facts(target, runtime, run_dir).exit_code is not None:
                return  # it has ended
            time.sleep(0.1)  # submitted a moment ago: the supervisor may not run yet
            found = job_processes(target, inner, self.exec_seconds)
        if found["supervisor"]:
            run_in(target, 'for pid in "$@"; do kill -TERM "$pid"; done', *found["supervisor"], seconds=self.exec_seconds)
            # wait for it, so that stopping the container next never cuts the job's grace period short
            deadline = time.monotonic() + STOP_GRACE_SECONDS + 5
            while self._supervisor_running(target, runtime) and time.monotonic() < deadline:
                time.sleep(0.2)
        elif found["job"]:
            # no supervisor left to do it: the job's own process group, TERM then KILL
            run_in(target, STOP_GROUPS, str(STOP_GRACE_SECONDS), *found["job"], seconds=self.exec_seconds + STOP_GRACE_SECONDS)
