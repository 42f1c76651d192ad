"""What the `--host` backend declares (host.py is the backend): its switch, the options it takes,
its entry in the registry. It keeps no files of its own in a run directory: the supervisor's are
the store's."""

from __future__ import annotations

from ..spec.options import ENV, GPUS, INTERPRETER, NOTIFY, QUEUE, WORKDIR, DetachedBackend, Option
from .declaration import Declaration

HOST = Option(
    "host",
    "--host",
    "no container: run the job as a detached process on this machine",
    kind="switch",
    config=True,
    default=False,
)

DETACHED = DetachedBackend(
    "host",
    options=(WORKDIR, GPUS, QUEUE, ENV, INTERPRETER, HOST, NOTIFY),
    switch="host",
    lacks="runs without a container",
)

DECLARATION = Declaration("host", entry="jupyter_trainer.backends.host:HostBackend", detached=DETACHED)
