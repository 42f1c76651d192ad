"""The header's progress: "45%", "ETA 00:12" from the bar being drawn."""

from __future__ import annotations

import re
from dataclasses import dataclass

# each starts only where a number starts, and no part can match what the next one does: linear on
# any line (a run of 20,000 digits costs one pass, not one per digit)
_TQDM = re.compile(r"(?<!\d)(\d{1,3})%\|[^|]*\|\s*\d++/\d++\s*\[[^<\]]*+<([^,\]]+)")
_KERAS = re.compile(r"(?<!\d)(\d++)/(\d++)\s*+(?:\[[=>.]*+\]|━++)\s*+(?:-\s*+)?(?:ETA:\s*+(\S++))?")
PROGRESS_CHARS = 2048  # of a line's end, where a bar's latest state is


@dataclass(frozen=True)
class Progress:
    percent: int
    eta: str  # as the bar says it ("00:12", "3s"), "" when it does not


def progress_of(line: str) -> Progress | None:
    """What the progress bar on `line` says: how far, and how long to go."""
    line = line[-PROGRESS_CHARS:]
    match = _TQDM.search(line)
    if match:
        eta = match.group(2).strip()
        return Progress(min(100, int(match.group(1))), "" if eta in ("?", "") else eta)
    match = _KERAS.search(line)
    if match and int(match.group(2)) > 0:
        done, total = int(match.group(1)), int(match.group(2))
        return Progress(min(100, done * 100 // total), match.group(3) or "")
    return None
