"""Side-by-side timing: medians over rounds, candidate and baseline interleaved in the same run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Comparison:
    name: str
    candidate: float  # median seconds (or other unit) of what we ship
    baseline: float  # median of what we compare against
    target: str  # e.g. "<= 1.0x"
    limit: float | None  # the ratio the target allows; None for a comparison given for scale only
    unit: str = "s"
    higher_is_better: bool = False

    @property
    def ratio(self) -> float:
        return self.candidate / self.baseline if self.baseline else float("inf")

    @property
    def met(self) -> bool | None:
        if self.limit is None:
            return None
        return self.ratio >= self.limit if self.higher_is_better else self.ratio <= self.limit


def interleaved(candidate: Callable[[], float], baseline: Callable[[], float], rounds: int) -> tuple[float, float]:
    """Run both `rounds` times, alternating, and return their medians (each call returns its own measure)."""
    ours, theirs = [], []
    for index in range(rounds):
        pair = (candidate, baseline) if index % 2 == 0 else (baseline, candidate)
        for function in pair:
            (ours if function is candidate else theirs).append(function())
    return statistics.median(ours), statistics.median(theirs)


def timed(function: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        function()
        return time.perf_counter() - start

    return run


def _format(value: float, unit: str) -> str:
    return f"{value * 1000:.2f} ms" if unit == "s" else f"{value:.3g} {unit}"


def table(results: list[Comparison]) -> str:
    rows = [("benchmark", "ours", "baseline", "ratio", "target", "met")]
    for r in results:
        rows.append(
            (r.name, _format(r.candidate, r.unit), _format(r.baseline, r.unit), f"{r.ratio:.3f}x", r.target, {True: "yes", False: "NO", None: "-"}[r.met])
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
