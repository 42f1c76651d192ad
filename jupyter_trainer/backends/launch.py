"""Runs a job's script as `python3 FILE ARGS` would run FILE in the job's working directory.

Copied into each run and started by the supervisor as `INTERPRETER RUN_DIR/launch.py MODE FILE
ARGS...` (so torchrun, accelerate and `python3 -X dev` start it as they would the script, once
per rank). It runs alone, on the job's own Python (any 3.x), and imports nothing of ours.

The code that runs is always the run's `script.py` beside this file: the cell, or the script as
it was submitted (whatever has become of the file since). FILE is its name:

* MODE `file`: the user's script, where it is;
* MODE `cell`: where the cell would be, were it saved in the working directory (never written).

FILE's directory (links resolved, as Python does) is `sys.path[0]`, `__file__` and `sys.argv[0]`
are FILE, the text is what `linecache` (tracebacks, `inspect`) shows for FILE, and no frame of
the launcher's is in a traceback. A child that multiprocessing starts with spawn or forkserver
runs this file again as its main, which runs the same text as FILE (named to it in the
environment, JUPYTER_TRAINER_SCRIPT_AS). The bytecode of the modules
the script imports is cached outside the working directory, so that the user's folder (and its
git status) holds only what the script itself writes.
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
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "script.py")
LAUNCHER = os.path.abspath(__file__)
# FILE, for a spawned child (runpy names this file in its sys.argv[0] while it runs it)
AS_FILE_VARIABLE = "JUPYTER_TRAINER_SCRIPT_AS"


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
    module.__dict__.update({"__file__": path, "__builtins__": __builtins__, "__spec__": None, "__loader__": _Text(text), "__cached__": None})
    sys.modules[run_name] = module
    exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def main():
    path = os.path.abspath(sys.argv[2])
    sys.argv[:] = [path] + sys.argv[3:]
    os.environ[AS_FILE_VARIABLE] = path
    _bytecode_elsewhere()
    _live_output()
    _spawn_children_from_here(path)
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:  # not under -P/-I, which add none
        sys.path[0] = os.path.dirname(os.path.realpath(path))
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
    if found is None or not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022 or not hasattr(sys, "pycache_prefix"):
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
            setattr(sys, name, io.TextIOWrapper(raw, encoding=stream.encoding, errors=stream.errors, write_through=True))
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
