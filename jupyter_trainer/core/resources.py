"""What a running job uses: CPU, memory and GPUs, as its backend sees them, and their recent history.

A backend gives a `Usage`: cumulative CPU seconds, memory in use and its limit, and each GPU's
utilisation and memory (from `nvidia-smi`). CPU % is the CPU time used between two looks over
the time between them, so the first look has none: `UsageHistory` keeps the looks a view took
(at a low rate) and turns them into readings and short series for sparklines.
"""

from __future__ import annotations

import collections
import time
from dataclasses import asdict, dataclass, field, replace

from .nvidia_smi import MAX_GPU_INDEX, MAX_GPUS, mebibytes, plausible_number  # noqa: F401  (said here for its readers)

HISTORY = 60  # readings kept per job (at one every USAGE_INTERVAL: 5 minutes)

# The one question asked of nvidia-smi: one CSV line per GPU, numbers only (MiB and %).
NVIDIA_SMI_QUERY = ("--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits")


@dataclass(frozen=True)
class GpuUsage:
    index: int
    utilization_percent: float | None
    memory_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class Usage:
    """One look at what a job uses. `scope` says whose use it is: "container" (the whole container
    the job runs in), "processes" (the job's own processes) or "instances" (SageMaker's)."""

    scope: str
    taken_at: float = field(default_factory=time.monotonic)
    cpu_seconds: float | None = None  # CPU time used since it started, all cores together
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    gpus: tuple[GpuUsage, ...] = ()
    cpu_percent: float | None = None  # set from two looks (100 = one core busy)
    instance_type: str | None = None  # a SageMaker job's instances, which it has to itself
    instance_count: int | None = None


def cpu_between(before: Usage | None, after: Usage) -> Usage:
    """`after` with its CPU % over the time since `before` (none without an earlier look)."""
    if before is None or before.cpu_seconds is None or after.cpu_seconds is None:
        return after
    elapsed = after.taken_at - before.taken_at
    used = after.cpu_seconds - before.cpu_seconds
    if elapsed <= 0 or used < 0:  # a restarted container counts from zero again
        return after
    return replace(after, cpu_percent=100.0 * used / elapsed)


def as_json(usage: Usage) -> dict:
    """What `status --json` says of it under `resources`."""
    data = asdict(usage)
    data.pop("taken_at")
    data["gpus"] = [asdict(gpu) for gpu in usage.gpus]
    return data


def format_bytes(count: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count / 1024:.0f} KiB"


def describe(usage: Usage) -> dict[str, str]:
    """Each quantity in words, for headers and `status`: {"cpu": "153%", "memory": "1.2 GiB of
    4.0 GiB", "gpu 0": "87% · 10.2 GiB of 24.0 GiB"} (what is not known is left out)."""
    words = {}
    if usage.cpu_percent is not None:
        words["cpu"] = f"{usage.cpu_percent:.0f}%"
    if usage.memory_bytes is not None:
        limit = f" of {format_bytes(usage.memory_limit_bytes)}" if usage.memory_limit_bytes else ""
        words["memory"] = format_bytes(usage.memory_bytes) + limit
    for gpu in usage.gpus:
        parts = [] if gpu.utilization_percent is None else [f"{gpu.utilization_percent:.0f}%"]
        if gpu.memory_bytes is not None:
            parts.append(
                format_bytes(gpu.memory_bytes)
                + (f" of {format_bytes(gpu.memory_total_bytes)}" if gpu.memory_total_bytes else "")
            )
        words[f"gpu {gpu.index}"] = " · ".join(parts) or "?"
    return words


def parse_nvidia_smi(text: str) -> tuple[GpuUsage, ...]:
    """nvidia-smi's CSV answer to NVIDIA_SMI_QUERY. The answer comes from inside a job's container,
    which the job may have rewritten: a field that is not a plausible value ("[N/A]", NaN, a
    negative or absurd number) is None, a line that is not four fields or has no plausible index
    is left out, an index seen before is not counted again, and at most MAX_GPUS are kept."""
    gpus: dict[int, GpuUsage] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) != 4:
            continue
        index, utilization, used, total = (plausible_number(value) for value in fields)
        if index is None or index != int(index) or not 0 <= index < MAX_GPU_INDEX or int(index) in gpus:
            continue
        gpus[int(index)] = GpuUsage(
            int(index),
            utilization if utilization is not None and 0 <= utilization <= 100 else None,
            mebibytes(used),
            mebibytes(total),
        )
        if len(gpus) == MAX_GPUS:
            break
    return tuple(gpus.values())


class UsageHistory:
    """A job's recent readings, one per look; each look's CPU % is against the look before."""

    def __init__(self, size: int = HISTORY):
        self.readings: collections.deque[Usage] = collections.deque(maxlen=size)
        self._last_look: Usage | None = None
        self._series: tuple[Usage | None, dict] | None = None  # the series, and the latest reading they end with

    def add(self, look: Usage) -> Usage:
        reading = cpu_between(self._last_look, look)
        self._last_look = look
        self.readings.append(reading)
        return reading

    @property
    def latest(self) -> Usage | None:
        return self.readings[-1] if self.readings else None

    def series(self) -> dict[str, list[float | None]]:
        """Each quantity over the readings kept: "cpu" (%), "memory" (bytes), "gpu N" (%). The
        same lists until the next reading (read them, never change them): a view draws them
        with every update, and a reading comes every few seconds."""
        latest = self.latest
        if self._series is not None and self._series[0] is latest:
            return self._series[1]
        found = self._series_of_readings()
        self._series = (latest, found)
        return found

    def _series_of_readings(self) -> dict[str, list[float | None]]:
        found: dict[str, list[float | None]] = {"cpu": [], "memory": []}
        indexes = sorted({gpu.index for reading in self.readings for gpu in reading.gpus})
        for reading in self.readings:
            found["cpu"].append(reading.cpu_percent)
            found["memory"].append(reading.memory_bytes)
            by_index = {gpu.index: gpu for gpu in reading.gpus}
            for index in indexes:
                gpu = by_index.get(index)
                found.setdefault(f"gpu {index}", []).append(gpu.utilization_percent if gpu else None)
        return found
