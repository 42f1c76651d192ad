"""What a job's container uses: the engine's stats (all of its processes, as `docker stats`
shows them), and its GPUs from nvidia-smi inside it when it has one."""

from __future__ import annotations

import time
from datetime import datetime

from ...core.resources import NVIDIA_SMI_QUERY, Usage, parse_nvidia_smi
from ...errors import BackendUnavailable
from .in_container import run_in

# nvidia-smi in the container, if it has one ("none" if not); its query comes as arguments. A
# wedged driver hangs it: after 2 s the exec's whole process group (the engine makes the exec's
# shell its leader) is killed, nvidia-smi and whatever it started with it.
GPU_QUERY = (
    "command -v nvidia-smi >/dev/null 2>&1 || { echo none; exit 0; }; "
    "(sleep 2; kill -9 -$$) 2>/dev/null & watchdog=$!; "
    'nvidia-smi "$@"; status=$?; kill $watchdog 2>/dev/null; exit $status'
)
GPU_QUERY_SECONDS = 3.0  # the answer awaited at most (the container's own tools may be replaced)
GPU_QUERY_BACKOFF = 600.0  # seconds a container whose nvidia-smi did not answer is not asked again


class ContainerUsage:
    """Reads containers' use; remembers which have no nvidia-smi, and which did not answer."""

    def __init__(self):
        self._without_gpus: set[str] = set()  # containers found to have no nvidia-smi
        self._gpus_silent_until: dict[str, float] = {}  # containers whose nvidia-smi did not answer

    def of(self, container) -> Usage | None:
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
            taken_at=read_at(stats),
            cpu_seconds=None if cpu is None else cpu / 1e9,
            memory_bytes=used,
            memory_limit_bytes=memory.get("limit"),
            gpus=self._gpus(container),
        )

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


def read_at(stats: dict) -> float:
    """When the engine read the container's counters, in seconds. The CPU % is the CPU time used
    between two looks over the time between them: the engine's own time of each reading, not when
    its answer came (a slow answer, or the nvidia-smi asked after it, would stretch or shrink it).
    Without it, this machine's clock of the same kind (the two looks are compared)."""
    try:
        return datetime.fromisoformat(stats["read"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return time.time()
