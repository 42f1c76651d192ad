"""A training job's failure reason as a record keeps it: bounded and printable, whoever wrote it;
and what went wrong, in a line, read from it once, as the record learns it (its headline).

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
# SageMaker's words for a script that failed, which the launcher writes too:
# 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: lr too high\n..."\nCommand "..."'
ERROR_MESSAGE = 'ErrorMessage "'
HEADLINE_CHARS = 300


def kept_text(text: str) -> str:
    """A reason (or other words of the job's side) as a record keeps and shows it: printable,
    stripped, cut past MAX_REASON_CHARS."""
    return _printable(text[:LOOKED_AT], cut=len(text) > LOOKED_AT)


def reason_from_file(path: Path) -> str:
    """The reason in a failure file, from no more than its start ("" if it is empty)."""
    data = read_small(path, LOOKED_AT + 1)  # a link or a FIFO in its place is an error, not a wait
    return _printable(data[:LOOKED_AT].decode("utf-8", "replace"), cut=len(data) > LOOKED_AT)


def headline(reason: str) -> str:
    """What went wrong, in a line, of a reason in SageMaker's words: the first line of its
    ErrorMessage, the exception rather than its wrapper. "" for a reason in other words (its own
    first line says it)."""
    if ERROR_MESSAGE not in reason:
        return ""
    lines = [line.strip() for line in reason.split(ERROR_MESSAGE, 1)[1].splitlines() if line.strip()]
    return lines[0].rstrip('"')[:HEADLINE_CHARS] if lines else ""


def _printable(text: str, cut: bool) -> str:
    shown = readable(text).strip()
    if not cut and len(shown) <= MAX_REASON_CHARS:
        return shown
    return shown[:MAX_REASON_CHARS].rstrip() + CUT_NOTE
