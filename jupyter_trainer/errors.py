"""The errors jupyter_trainer raises for things a user can fix.

Every user error is one line: what is wrong, then what to do. The magics and
the CLI print ``str(error)`` and nothing else, so the message must stand alone.
"""

from __future__ import annotations


class TrainerError(Exception):
    """Base of every error meant for the user (no traceback is shown)."""

    def __init__(self, message: str, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = " ".join(self.message.split())
        if self.hint:
            text = f"{text}: {' '.join(self.hint.split())}"
        return text


class InvalidOption(TrainerError):
    """A magic or CLI option has a value we cannot use."""


class InvalidName(InvalidOption):
    """A job or container name breaks the naming rules."""


class UnknownJob(TrainerError):
    """No job of that name is in the store."""


class JobReplaced(UnknownJob):
    """The run a handle (or a view) follows was removed, and a new job of its name took its place."""


class UnknownBackend(TrainerError):
    """A job or a spec names a backend no registry knows (a record written by another version, or
    by hand): where jobs are listed, it is one row like any other."""

    def __init__(self, name: str, known: list[str] | None = None):
        self.name = name
        super().__init__(f"unknown backend {name!r}", f"use one of {', '.join(known)}" if known else None)


class NameInUse(TrainerError):
    """The name belongs to a job that may not be replaced."""


class BackendUnavailable(TrainerError):
    """The runtime (Docker engine, SageMaker SDK, AWS) cannot be reached or used."""


class Unreachable(BackendUnavailable):
    """A remote Docker host cannot be reached just now (a laptop offline, a VPN down, the host
    rebooting): its jobs keep their status, and say since when it could not be reached."""

    def __init__(self, host: str, message: str, hint: str | None = None):
        self.host = host
        super().__init__(message, hint)


class ImageNotFound(TrainerError):
    """The container image does not exist locally and could not be pulled."""


class CorruptRecord(TrainerError):
    """A job record on disk cannot be read."""


class StoreError(TrainerError):
    """The job store cannot be written (a full disk, a read-only directory)."""


class RunFileError(TrainerError):
    """A job's own file (its log, say) cannot be read: the job may have replaced it."""
