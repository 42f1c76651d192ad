"""The one place where docker-py's and paramiko's errors become ours.

A call to an engine fails in one of four ways, each worded once here:

* the engine refused it (docker-py's APIError): "Docker refused to DO: why";
* an SSH server had no session to spare (sshd's MaxSessions): the host is up, ask again;
* the engine, or the way to it, is gone: for a remote host an `Unreachable` that names it (its
  jobs keep their status), for this machine's engine a `BackendUnavailable`;
* gone in the middle of starting a job on a remote host: the job may run there with no record.

and a few refusals have words of their own: a container that could not be created (GPUs the
engine cannot give), an image that could not be pulled, a remote --workdir that is not there, a
script whose path the engine could not follow.

What was being done (`Doing`) shapes the words: a submission waits on the answer, so it is told
the cause and the way out; a look at a job repeats every poll, so its words never change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import BackendUnavailable, ImageNotFound, InvalidOption, TrainerError, Unreachable
from .hosts import Engine


@dataclass(frozen=True)
class Doing:
    """What a call to an engine was for, as its failure is worded."""

    words: str = ""  # "stop the job": said as "while trying to stop the job" ("" says nothing)
    submitting: bool = False  # a new job waits on it: give the cause, and --host as the way out
    may_have_started: bool = False  # lost mid-way, the job may run on a remote host without a record
    way_out: str = "or use --host to run without a container"  # told to a submission this machine's engine failed


REACH = Doing(submitting=True)
START = Doing("start the job", submitting=True, may_have_started=True)
LOOK = Doing()  # its words are the job's reason at every poll: no cause in them, which varies
STOP = Doing("stop the job")
READ_LOG = Doing("read the job's log")
LOCAL_MODE = Doing(
    "run SageMaker local mode",
    submitting=True,
    way_out="or train on SageMaker itself (an --instance-type other than local)",
)
LIST = Doing("list its containers")
REMOVE = Doing("remove the container")


def engine_errors() -> tuple[type[BaseException], ...]:
    """What a call to an engine raises when the engine, or the way to it, fails (SSH's own errors
    are not OSErrors)."""
    import docker

    errors: tuple[type[BaseException], ...] = (docker.errors.DockerException, OSError, EOFError)
    try:
        import paramiko
    except ImportError:
        return errors
    return (*errors, paramiko.SSHException)


def refused(exc: BaseException | None) -> bool:
    """Whether the engine answered, and said no: it is there."""
    import docker

    return isinstance(exc, docker.errors.APIError)


def busy(exc: BaseException | None) -> bool:
    """Whether an SSH server refused a new session of a connection that is up (MaxSessions reached)."""
    try:
        import paramiko
    except ImportError:
        return False
    while exc is not None:
        if isinstance(exc, paramiko.ChannelException):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def translate(exc: BaseException | None, engine: Engine, doing: Doing) -> TrainerError:
    """Our error for a failed call to `engine` (exc None: it failed a moment ago, and was not asked)."""
    if refused(exc):
        return TrainerError(f"Docker refused to {doing.words or 'answer'}: {exc.explanation or exc}")
    if busy(exc):
        return BackendUnavailable(
            f"the Docker engine on {engine.label} has no SSH session to spare just now (sshd's MaxSessions)",
            "try again in a moment, or raise MaxSessions in the host's sshd_config",
        )
    during = f" while trying to {doing.words}" if doing.words else ""
    cause = f" ({brief(exc)})" if doing.submitting and exc is not None else ""
    if engine.remote and doing.may_have_started:
        return Unreachable(
            engine.label,
            f"lost the Docker engine on {engine.label} while starting the job, so nothing was recorded{cause}",
            "once it answers again, look there (docker ps) before you submit again: the job may have started",
        )
    if engine.remote:
        hint = "check the host and your connection to it"
        return Unreachable(engine.label, f"cannot reach the Docker engine on {engine.label}{during}{cause}", hint)
    if doing.submitting:
        hint = f"start Docker or set DOCKER_HOST, {doing.way_out}"
    else:
        hint = "check that Docker is running"
    return BackendUnavailable(f"no Docker engine reachable at {engine.url}{during}{cause}", hint)


def not_created(name: str, exc: BaseException, gpus: str | None) -> TrainerError:
    """The engine refused to create a job's container."""
    detail = getattr(exc, "explanation", None) or str(exc)
    if gpus and "gpu" in str(detail).lower():
        return BackendUnavailable(
            f"Docker cannot give the container GPUs ({detail})", "install the NVIDIA Container Toolkit, or drop --gpus"
        )
    return TrainerError(f"Docker could not create container {name!r}: {detail}")


def no_image(image: str, exc: BaseException) -> TrainerError:
    """An image that is not on the engine's machine could not be pulled either."""
    detail = getattr(exc, "explanation", None) or str(exc)
    return ImageNotFound(
        f"image {image!r} is not on this machine and could not be pulled ({detail})",
        "build or pull it first, or check the name",
    )


def no_workdir(workdir: str, engine: Engine, exc: BaseException) -> InvalidOption | None:
    """The engine refused to mount --workdir, not there (a bind mount's source); None for another refusal."""
    detail = str(getattr(exc, "explanation", None) or exc)
    if "does not exist" not in detail:
        return None
    return InvalidOption(
        f"--workdir {workdir} does not exist on {engine.label}",
        "give the directory there that holds the script (a clone of your code)",
    )


def script_unreadable(where: str, exc: BaseException) -> InvalidOption:
    """The engine could not follow a script's path: its words name its own files (an overlay
    directory of the container's), so only their last part, the reason, is said."""
    detail = str(getattr(exc, "explanation", None) or exc).rsplit(": ", 1)[-1].strip()
    return InvalidOption(
        f"cannot read the script {where}: {detail or 'Docker could not follow its path'}",
        "check the path (relative to --workdir, on that host)",
    )


def brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return text[:160]


# The engine's words for a container no longer in the state a look found it in: 409 when an exec is
# created in it, and 500 with the same words when it stopped between an exec's creation and start.
_NOT_AS_IT_WAS = re.compile(r"\bis (not running|restarting|paused)\b")
# A container restarted between an exec's creation and its start (or its inspection) has forgotten
# the exec: 404 with these words.
_EXEC_FORGOTTEN = re.compile(r"^No such exec instance\b")


def exec_began_after_all(client, exec_id: str | None, exc: BaseException) -> bool:
    """Whether the exec whose start failed on the way back (the connection dropped, or timed out,
    after the engine had the request) started all the same: then its job runs, and must be
    recorded, not discarded. Asked on a new connection; an engine that does not answer it either
    leaves it unknown (said as not started: the error is raised, as before)."""
    if exec_id is None or refused(exc) or not isinstance(exc, engine_errors()):
        return False
    try:
        seen = client.api.exec_inspect(exec_id)
    except engine_errors():
        return False
    return bool(seen.get("Running") or seen.get("Pid") or seen.get("ExitCode") is not None)


def changed_under_the_look(exc: BaseException | None) -> bool:
    """Whether the engine refused a look inside a container for the state it is in now (not
    running, restarting, paused, or restarted since the look's exec was made), which differs from
    the one it had just said."""
    import docker

    if not isinstance(exc, docker.errors.APIError):
        return False
    words = str(exc.explanation or "")
    return exc.status_code == 409 or bool(
        _NOT_AS_IT_WAS.search(words) or (exc.status_code == 404 and _EXEC_FORGOTTEN.match(words))
    )
