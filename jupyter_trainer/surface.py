"""The commands a message tells people to run, in the words of the surface they are using.

A hint such as "stop it first with ..." names `%train_stop NAME` in a notebook and
`jupyter-trainer stop NAME` in a terminal. The command line runs inside `speaking(TERMINAL)`;
elsewhere, a process that runs IPython (the magics, the Python API in a notebook) speaks as a
notebook does, and any other (a plain Python script using the API) as a terminal does.
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

_in_use: str | None = None  # None: a notebook's words where IPython runs, a terminal's elsewhere


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


def in_a_notebook() -> bool:
    """Whether messages speak to someone in IPython (a notebook, a console) rather than a terminal:
    the command line says so; otherwise it is whether this process runs IPython."""
    if _in_use is not None:
        return _in_use == NOTEBOOK
    import sys

    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def command(action: str, name: str = "NAME") -> str:
    """The command for `action` ("list", "logs", "follow", "stop", ...) on job `name`."""
    return _COMMANDS[NOTEBOOK if in_a_notebook() else TERMINAL][action].format(name=name)


def follow_and_stop(name: str) -> str:
    """The line printed under a job that is still running."""
    return f"Follow with {command('follow', name)}, stop with {command('stop', name)}."
