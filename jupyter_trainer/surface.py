"""The commands a message tells people to run, in the words of the surface they are using.

A hint such as "stop it first with ..." names `%train_stop NAME` in a notebook and
`jupyter-trainer stop NAME` in a terminal. The command line runs inside `speaking(TERMINAL)`;
everything else (the magics, the Python API inside IPython) speaks as a notebook does.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

NOTEBOOK = "notebook"
TERMINAL = "terminal"

_COMMANDS = {
    NOTEBOOK: {
        "list": "%train_jobs",
        "logs": "%train_logs {name}",
        "follow": "%train_logs {name} --follow",
        "stop": "%train_stop {name}",
        "stop_container": "%train_stop {name} --container",
        "status": "%train_attach {name}",
        "rm": "%train_rm {name}",
    },
    TERMINAL: {
        "list": "jupyter-trainer list",
        "logs": "jupyter-trainer logs {name}",
        "follow": "jupyter-trainer logs {name} -f",
        "stop": "jupyter-trainer stop {name}",
        "stop_container": "jupyter-trainer stop {name} --container",
        "status": "jupyter-trainer status {name}",
        "rm": "jupyter-trainer rm {name}",
    },
}

_in_use = NOTEBOOK


@contextlib.contextmanager
def speaking(surface: str) -> Iterator[None]:
    """Messages name `surface`'s commands inside this block (the command line runs in one)."""
    global _in_use
    if surface not in _COMMANDS:
        raise ValueError(f"unknown surface {surface!r}")
    before, _in_use = _in_use, surface
    try:
        yield
    finally:
        _in_use = before


def command(action: str, name: str = "NAME") -> str:
    """The command for `action` ("list", "logs", "follow", "stop", ...) on job `name`."""
    return _COMMANDS[_in_use][action].format(name=name)


def follow_and_stop(name: str) -> str:
    """The line printed under a job that is still running."""
    return f"Follow with {command('follow', name)}, stop with {command('stop', name)}."
