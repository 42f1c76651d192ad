"""A training job's failure reason as a record keeps it: bounded and printable, whoever wrote it.

The reason comes from the job's own side (SageMaker's FailureReason is what the training
container wrote to /opt/ml/output/failure; in local mode the launcher's report, kept in the
run's failure file), so it may be huge, binary or full of terminal control. It is kept `readable`
(wording.py: without what a terminal would act on or what reorders the text, as log lines are
shown) and cut, with a note, past
MAX_REASON_CHARS; a file is read that far only, never whole.
"""

from __future__ import annotations

from pathlib import Path

from ...core.files import read_small
from ...core.wording import readable

MAX_REASON_CHARS = 2048  # SageMaker keeps at most 1024 characters of the failure file
LOOKED_AT = 4 * MAX_REASON_CHARS  # of the reason's start, room for the control it may hold
CUT_NOTE = f"\n… (cut to its first {MAX_REASON_CHARS} characters)"


def kept_text(text: str) -> str:
    """A reason (or other words of the job's side) as a record keeps and shows it: printable,
    stripped, cut past MAX_REASON_CHARS."""
    return _printable(text[:LOOKED_AT], cut=len(text) > LOOKED_AT)


def reason_from_file(path: Path) -> str:
    """The reason in a failure file, from no more than its start ("" if it is empty)."""
    data = read_small(path, LOOKED_AT + 1)  # a link or a FIFO in its place is an error, not a wait
    return _printable(data[:LOOKED_AT].decode("utf-8", "replace"), cut=len(data) > LOOKED_AT)


def _printable(text: str, cut: bool) -> str:
    shown = readable(text).strip()
    if not cut and len(shown) <= MAX_REASON_CHARS:
        return shown
    return shown[:MAX_REASON_CHARS].rstrip() + CUT_NOTE
