"""How a job's exit code and duration are said, and how words from a job's side are shown, in one
place for every reader: the views, the CLI, and the notifier (backends/notify.py), which runs alone
on the job's python3 and gets this file's code put before its own.

Standard library only, Python 3.6 or later, importing nothing of the package.
"""

import re

# What a job writes and a person is shown (log lines, failure reasons, a runtime's words) may hold
# what would act on the terminal or on the text around it, and is shown without it (`readable`):
# CSI sequences, string sequences (OSC, DCS, SOS, PM, APC) up to their terminator or the line's
# end, other escape sequences, 8-bit CSI, C0 controls but tab and newline, C1 controls, and
# Unicode's direction controls (marks, embeddings, overrides, isolates), which reorder what
# follows them: "\u202edeliaf" reads "failed"; and lone surrogates (JSON's "\ud800" reads as one),
# which no UTF-8 terminal or file can be written (in a str, a pair is one code point: any left is
# alone).
ESCAPE_SEQUENCES = (
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
)
DIRECTION_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # the inside of a regex's [...]
LONE_SURROGATES = "\ud800-\udfff"  # likewise
NOT_SHOWN = re.compile(
    ESCAPE_SEQUENCES
    + r"|\x9b[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f-\x9f"
    + DIRECTION_CONTROLS
    + LONE_SURROGATES
    + r"]|\x1b"
)


def readable(text):
    """Words from a job's side as a person is shown them: without anything in NOT_SHOWN."""
    return NOT_SHOWN.sub("", text)


EXIT_CODE_MEANINGS = {
    1: "the script raised an error",
    2: "bad command-line usage",
    126: "the interpreter could not be executed",
    127: "the interpreter was not found",
    134: "aborted (SIGABRT)",
    137: "killed (SIGKILL), often out of memory",
    139: "segmentation fault (SIGSEGV)",
    143: "terminated (SIGTERM)",
}


def describe_exit_code(code):
    """'exit code 137: killed (SIGKILL), often out of memory'; '' for no code."""
    if code is None:
        return ""
    meaning = EXIT_CODE_MEANINGS.get(code)
    if meaning:
        return "exit code {}: {}".format(code, meaning)
    if code > 128:
        return "exit code {}: killed by signal {}".format(code, code - 128)
    return "exit code {}".format(code)


def format_duration(seconds):
    """'45s', '3m07s', '2h03m07s', '1d 02h03m'; '-' when unknown."""
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return "{}d {:02d}h{:02d}m".format(days, hours, minutes)
    if hours:
        return "{}h{:02d}m{:02d}s".format(hours, minutes, seconds)
    if minutes:
        return "{}m{:02d}s".format(minutes, seconds)
    return "{}s".format(seconds)


def text_table(rows, header, right=()):
    """Rows of cells as text: columns two blanks apart, each as wide as its widest cell, the
    `right` columns (by index) of the rows, not of the header, set to the right."""
    lines = [tuple(header)] + [tuple(row) for row in rows]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.rjust(widths[i]) if index and i in right else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ).rstrip()
        for index, line in enumerate(lines)
    )
