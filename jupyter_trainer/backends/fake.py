"""A backend that runs nothing: tests set what it observes. The seam's first-class fake."""

from __future__ import annotations

from pathlib import Path

from ..core.record import JobRecord, Observation
from ..spec.job_spec import DetachedSpec
from .base import LOG_FILE, BackendBase, FileLogSource, write_script


class FakeRuntime:
    def to_dict(self) -> dict:
        return {"fake": True}


class FakeBackend(BackendBase):
    name = "fake"
    status_interval = 2.0  # seconds between two status checks by a widget
    usage_outlives_the_job = False
    starts_at_launch = True
    has_containers = True

    def __init__(self):
        self.launched: list[str] = []
        self.stopped: list[tuple[str, bool]] = []
        self.observations: dict[str, Observation] = {}
        self.fail_launch: Exception | None = None
        self.usages: dict[str, object] = {}  # a job's name: the Usage `usage` gives
        self.asks = ""  # what `asking` says: a test sets words to have views ask it on a thread

    def preflight(self, spec: DetachedSpec, store) -> None:
        pass

    def prepare(self, run_dir: Path, spec: DetachedSpec) -> None:
        write_script(run_dir, spec.script, spec.from_cell)

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> "FakeRuntime":
        if self.fail_launch is not None:
            raise self.fail_launch
        self.launched.append(record.name)
        return FakeRuntime()

    def asking(self, record: JobRecord) -> str:
        return self.asks

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        return self.observations.get(record.name, Observation(alive=True, started=True))

    def log_source(self, record: JobRecord, run_dir: Path) -> FileLogSource:
        return FileLogSource(run_dir / LOG_FILE)

    def describe_where(self, record: JobRecord) -> str:
        return "nowhere (a fake backend)"

    def remove_unused_containers(self, store, records) -> list[str]:
        return []  # its "containers" are never left behind

    def describe_host(self, record: JobRecord) -> str | None:
        return None

    def describe_facts(self, record: JobRecord) -> list[str]:
        return []  # the status and exit code say it all

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        self.stopped.append((record.name, container))
        self.observations[record.name] = Observation(exit_code=143, alive=False, started=True)

    # -- for tests ---------------------------------------------------------

    def finish(self, name: str, exit_code: int) -> None:
        self.observations[name] = Observation(exit_code=exit_code, alive=False, started=True)

    def vanish(self, name: str, why: str) -> None:
        self.observations[name] = Observation(alive=False, why_gone=why)

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return []

    def usage(self, record, run_dir):
        return self.usages.get(record.name)
