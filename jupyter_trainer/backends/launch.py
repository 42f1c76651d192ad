"""Runs a job's script as `python3 FILE ARGS` would run FILE in the job's working directory.

Copied into each run and started by the supervisor as `INTERPRETER RUN_DIR/launch.py ARGS...` (so
torchrun, accelerate and `python3 -X dev` start it as they would the script, once per rank). Every
word after its own path is the script's, also those a wrapping interpreter adds of its own
(`sh -c 'exec python3 "$0" --steps 1'`). It runs alone, on the job's own Python (any 3.x), and
imports nothing of ours.

The code that runs is always the run's `script.py` beside this file: the cell, or the script as
it was submitted (whatever has become of the file since). FILE is its name, read from the run's
`launch_target` beside this file (FILE, NUL, and the directory of FILE's real place when the job's
machine cannot find it by following FILE's links; see backends/base.py: write_launch_target):

* the user's script, where it is, by the name it was given (a link keeps its own);
* for a cell, where the cell would be, were it saved in the working directory (never written).

FILE's real directory (links resolved, as Python does) is `sys.path[0]`, `__file__` and
`sys.argv[0]` are FILE, the text is what `linecache` (tracebacks, `inspect`) shows for FILE, and
no frame of the launcher's is in a traceback. A child that multiprocessing starts with spawn or
forkserver runs this file again as its main, which runs the same text as FILE (named to it in the
environment, JUPYTER_TRAINER_SCRIPT_AS). The bytecode of the modules the script imports is cached
outside the working directory, so that the user's folder (and its git status) holds only what the
script itself writes.

An interpreter that runs this file otherwise than Python runs a file it is given (so that it is not
`sys.argv[0]`, or the rest of `sys.argv` is not what follows it on the process's command line, as
when runpy runs it from `-c`, or it has no `__file__`, as when its text is exec()'d), or that runs
a copy of it away from its run, leaves it unable to tell which words are the script's, or which
script to run: the job fails, its last line the reason (a LaunchError), and the script never runs.
"""

import io
import linecache
import os
import stat
import sys
import traceback
import types
from importlib.machinery import PathFinder

# imported above while sys.path[0] is still the run's directory: never a module of the user's
# This file, as Python names it when it runs it as a file; None when its text was run otherwise
# (exec'd: no __file__), which main() says as the job's reason before anything else.
LAUNCHER = os.path.abspath(__file__) if isinstance(globals().get("__file__"), str) else None
HERE = os.path.dirname(LAUNCHER) if LAUNCHER else None
SCRIPT = os.path.join(HERE, "script.py") if HERE else None
TARGET = os.path.join(HERE, "launch_target") if HERE else None  # FILE, NUL, FILE's real directory (or nothing)
# FILE, for a spawned child (runpy names this file in its sys.argv[0] while it runs it)
AS_FILE_VARIABLE = "JUPYTER_TRAINER_SCRIPT_AS"


class LaunchError(Exception):
    """What keeps the launcher from running the script as it was asked to: the job's reason."""


class _Text:
    """The loader linecache asks for the text of a file that is not there, or not as it ran."""

    def __init__(self, text):
        self.text = text

    def get_source(self, name):
        return self.text


def _run(path, run_name):
    """Run the run's script as `path` in a fresh module `run_name`; returns its namespace."""
    with open(SCRIPT, "rb") as handle:
        source = handle.read()
    text = source.decode("utf-8", "replace")
    # mtime None: linecache keeps it although no such file exists (see linecache.checkcache)
    linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    module = types.ModuleType(run_name)
    module.__dict__.update(
        {
            "__file__": path,
            "__builtins__": __builtins__,
            "__spec__": None,
            "__loader__": _Text(text),
            "__cached__": None,
        }
    )
    sys.modules[run_name] = module
    exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def main():
    try:
        path, directory = _target()
    except LaunchError as error:  # said as Python says an error (the job's reason), in one frame
        traceback.print_exception(LaunchError, error, error.__traceback__, limit=-1)
        sys.exit(1)
    sys.argv[0] = path
    os.environ[AS_FILE_VARIABLE] = path
    _bytecode_elsewhere()
    _live_output()
    _spawn_children_from_here(path)
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:  # not under -P/-I, which add none
        sys.path[0] = directory or os.path.dirname(os.path.realpath(path))
    try:
        _run(path, "__main__")
    except SystemExit:
        raise
    except BaseException:  # as Python shows it, without this launcher's frames
        kind, error, frames = sys.exc_info()
        while frames is not None and frames.tb_frame.f_code.co_filename == _run.__code__.co_filename:
            frames = frames.tb_next
        if sys.excepthook is sys.__excepthook__:  # Python's own reads the file, not linecache
            traceback.print_exception(kind, error, frames)
        else:
            sys.excepthook(kind, error, frames)
        sys.exit(130 if kind is KeyboardInterrupt else 1)


def _target():
    """FILE and the directory of its real place (None: found by following FILE here), as the run
    says; a LaunchError when this launcher cannot tell which words are the script's arguments or
    which script to run."""
    not_as_main = _not_run_as_main_file()
    if not_as_main:
        raise LaunchError(
            "--interpreter ran the launcher otherwise than python3 runs a file (%s), so which words are the "
            "script's cannot be told: "
            'a wrapper passes the file on with the words after it (sh -c \'exec python3 "$0" "$@"\')' % not_as_main
        )
    try:
        with open(TARGET, "rb") as handle:
            given = handle.read(1 << 16)
    except OSError as error:
        raise LaunchError(
            "cannot read %s beside the launcher (%s): --interpreter must run the launcher where it lies in the "
            "job's run, not a copy of it" % (os.path.basename(TARGET), error.strerror or error)
        )
    path, _, directory = given.partition(b"\0")
    if not path or b"\0" in directory:
        raise LaunchError("%s does not name a script to run" % TARGET)
    return os.path.abspath(os.fsdecode(path)), os.fsdecode(directory) or None


def _not_run_as_main_file():
    """How the interpreter ran this file otherwise than as its main file ("" if it did): its
    sys.argv[0] is this file, and where the process's own command line is known (sys.orig_argv,
    Python 3.10+, or /proc), the words after this file's path there are the rest of sys.argv (runpy
    run from `-c` puts this file in sys.argv[0], and leaves it in sys.argv[1] too)."""
    if LAUNCHER is None:
        return "its text was run, not its file: no __file__"
    if not sys.argv or not _same_file(sys.argv[0], LAUNCHER):
        return "sys.argv[0] is %s" % repr(sys.argv[0] if sys.argv else "")[:42]
    command_line = getattr(sys, "orig_argv", None) or _proc_command_line()
    if command_line is None:
        return ""
    after = len(sys.argv) - 1
    named = command_line[len(command_line) - after - 1] if len(command_line) > after else ""
    if command_line[len(command_line) - after :] != sys.argv[1:] or not _same_file(named, LAUNCHER):
        return "sys.argv is not its command line from the launcher on"
    return ""


def _proc_command_line():
    """The process's command line where Python keeps none (before 3.10): Linux's, else None."""
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return None
    return [os.fsdecode(word) for word in words[:-1]] or None


def _same_file(path, other):
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):
        return False


def _bytecode_elsewhere():
    """Imported modules' bytecode in a private directory of this user's (Python 3.8+), not in
    `__pycache__` beside them; none written where that cannot be made safely. An interpreter
    told where, or not to write any (-B, PYTHONPYCACHEPREFIX), is left as it was told."""
    if sys.dont_write_bytecode or getattr(sys, "pycache_prefix", None) is not None:
        return
    path = os.path.join(os.environ.get("TMPDIR") or "/tmp", "jupyter_trainer-pycache-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        path = None
    try:
        found = os.lstat(path) if path else None
    except OSError:
        found = None
    # another user's directory, or one others may write, could hold bytecode made to be run here
    if (
        found is None
        or not stat.S_ISDIR(found.st_mode)
        or found.st_uid != os.getuid()
        or found.st_mode & 0o022
        or not hasattr(sys, "pycache_prefix")
    ):
        sys.dont_write_bytecode = True
        return
    sys.pycache_prefix = path


def _live_output():
    """The job's output reaches its log as it is written, as PYTHONUNBUFFERED asks, also under an
    interpreter that ignores the environment (-I, -E)."""
    if not os.environ.get("PYTHONUNBUFFERED") or not sys.flags.ignore_environment:
        return
    for name in ("stdout", "stderr"):  # as -u makes them: no buffer under the text layer
        stream = getattr(sys, name)
        try:
            stream.flush()
            raw = io.FileIO(stream.fileno(), "w", closefd=False)
            setattr(
                sys, name, io.TextIOWrapper(raw, encoding=stream.encoding, errors=stream.errors, write_through=True)
            )
        except (AttributeError, OSError, ValueError):
            continue


def _spawn_children_from_here(path):
    """multiprocessing's spawn and forkserver start a child by running the parent's `__main__`
    file again (a DataLoader's workers, say): that file is this one, which runs the same text as
    `path` (see the end of this file). `multiprocessing.spawn` is changed as it is imported, if the
    script ever imports it."""

    def point_here(spawn):
        prepared = spawn.get_preparation_data

        def get_preparation_data(name):
            data = prepared(name)
            if data.get("init_main_from_path") == path:
                data["init_main_from_path"] = LAUNCHER
            return data

        spawn.get_preparation_data = get_preparation_data

    class Finder:
        @staticmethod
        def find_spec(name, search_path=None, target=None):
            if name != "multiprocessing.spawn":
                return None
            spec = PathFinder.find_spec(name, search_path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                point_here(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder)


if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__":  # a spawned child's main (see _spawn_children_from_here): the script's text again
    _bytecode_elsewhere()
    globals().update(_run(os.environ.get(AS_FILE_VARIABLE) or SCRIPT, "__mp_main__"))
