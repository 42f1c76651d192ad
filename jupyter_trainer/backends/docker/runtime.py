"""What a Docker job's record holds of its container, and where a run's files are inside one."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ...core.record import NAME_PATTERN, JobRecord
from ...core.store import LINE_FILE, TURN_FILE, WAITER_FILE
from ..base import (
    CLOCK_FILE,
    EXIT_CODE_FILE,
    LAUNCH_FILE,
    LAUNCH_TARGET_FILE,
    LOG_FILE,
    NOTIFIED_FILE,
    NOTIFY_FILE,
    PID_FILE,
    SCRIPT_FILE,
    SUPERVISOR_FILE,
    malformed_runtime,
    read_runtime,
)
from .declared import NO_RESTART_FILE, RESTART_FILE, RESTARTS_FILE

MOUNTED_JOBS_DIR = "/jupyter_trainer/jobs"  # where containers we create see their runs' files
SHIPPED_JOBS_DIR = "/tmp/jupyter_trainer/jobs"  # run files copied into containers we did not create
RUN_FILES = (
    SCRIPT_FILE, LAUNCH_FILE, LAUNCH_TARGET_FILE, SUPERVISOR_FILE, NOTIFY_FILE, LOG_FILE, PID_FILE, EXIT_CODE_FILE,
    NOTIFIED_FILE, CLOCK_FILE, RESTART_FILE, RESTARTS_FILE, NO_RESTART_FILE,
)  # fmt: skip
TURN_FILES = (LINE_FILE, WAITER_FILE, TURN_FILE)  # a job that waits its turn in its machine's lines: its waiter's
# A run's directory in a container: MOUNTED_JOBS_DIR/NAME/RUN or SHIPPED_JOBS_DIR/STORE_ID/NAME/RUN
INNER_RUN_DIR = re.compile(
    r"(?:/jupyter_trainer/jobs|/tmp/jupyter_trainer/jobs/[0-9a-f]{12})/[A-Za-z0-9][A-Za-z0-9_.-]{0,62}/[0-9]{1,9}"
)
WORKSPACE = "/workspace"


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
    engine: dict | None = None  # the engine it runs on (hosts.Engine.to_dict); None in older records
    sync_facts: list | None = None  # what --sync left out, in words (credential paths, never contents)
    restarts_allowed: int | None = None  # --restarts N: how often its container's keeper may start it again
    restarts: int | None = None  # how often it was started again, as last seen (container_started_at is that start's)
    restart_causes: list | None = None  # why each start again was needed, in words
    image_id: str | None = None  # the container's image (sha256:...), as `docker image inspect` gives its id

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, record: JobRecord) -> "DockerRuntime":
        kinds = {
            "container_id": str,
            "container_name": str,
            "container_started_at": str,
            "exec_id": str,
            "run_dir": str,
        }
        runtime = read_runtime(
            cls,
            record,
            {
                **kinds,
                "mounted": bool,
                "shared_dir": (str, "optional"),
                "engine": (dict, "optional"),
                "sync_facts": (list, "optional"),
                "restarts_allowed": (int, "optional"),
                "restarts": (int, "optional"),
                "restart_causes": (list, "optional"),
                "image_id": (str, "optional"),
            },
        )
        if runtime.sync_facts is not None and not all(isinstance(fact, str) for fact in runtime.sync_facts):
            raise malformed_runtime(record, "sync_facts is not a list of words")
        if runtime.restart_causes is not None and not all(isinstance(cause, str) for cause in runtime.restart_causes):
            raise malformed_runtime(record, "restart_causes is not a list of words")
        if not INNER_RUN_DIR.fullmatch(runtime.run_dir):
            raise malformed_runtime(record, "run_dir is not a run's directory")
        if runtime.shared_dir is not None and not NAME_PATTERN.fullmatch(runtime.shared_dir):
            raise malformed_runtime(record, "shared_dir is not a container's name")
        return runtime
