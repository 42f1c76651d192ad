"""Runs a job's script as `python3 FILE ARGS` would run FILE in the job's working directory.

Copied into each run and started by the supervisor as `INTERPRETER RUN_DIR/launch.py MODE FILE
ARGS...` (so torchrun, accelerate and `python3 -X dev` start it as they would the script, once
per rank). It runs alone, on the job's own Python (any 3.x), and imports nothing of ours.

* MODE `file`: FILE is the user's script, run where it is.
* MODE `cell`: FILE is where the cell would be, were it saved in the working directory; the
  cell itself is `script.py` beside this file, and nothing is written in the working directory.
  Its source is given to `linecache`, so a traceback shows the cell's lines.

Either way FILE's directory is `sys.path[0]`, `__file__` and `sys.argv[0]` are FILE, and the
launcher leaves no frame of its own in a traceback. The bytecode of the modules the script
imports is cached outside the working directory, so that the user's folder (and its git status)
holds only what the script itself writes.
"""

import linecache
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
CELL = os.path.join(HERE, "script.py")


def main():
    mode, path = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == "file":
        with open(path, "rb") as handle:
            source = handle.read()
    else:
        with open(CELL, "rb") as handle:
            source = handle.read()
        text = source.decode("utf-8", "replace")
        # mtime None: linecache keeps it although no such file exists (see linecache.checkcache)
        linecache.cache[path] = (len(text), None, text.splitlines(True), path)
    sys.argv[:] = [path] + sys.argv[3:]
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:  # not under -P/-I, which add none
        sys.path[0] = os.path.dirname(path)
    if mode == "cell":
        _spawn_children_from(CELL, path)
    _bytecode_elsewhere()
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update({"__file__": path, "__builtins__": __builtins__, "__spec__": None, "__loader__": None, "__cached__": None})
    sys.modules["__main__"] = main_module
    try:
        exec(compile(source, path, "exec", dont_inherit=True), main_module.__dict__)
    except SystemExit:
        raise
    except BaseException:  # as Python shows it, without this launcher's frames
        kind, error, frames = sys.exc_info()
        while frames is not None and frames.tb_frame.f_code.co_filename == main.__code__.co_filename:
            frames = frames.tb_next
        if sys.excepthook is sys.__excepthook__:  # Python's own reads the file, not linecache: a cell has none
            import traceback

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
    import stat

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


def _spawn_children_from(cell, path):
    """multiprocessing's spawn and forkserver start a child by running the parent's `__main__`
    file again (a DataLoader's workers, say): for a cell, the file that exists is `cell`. Its
    module is changed as it is imported, if the script ever imports it."""

    def point_at_cell(spawn):
        prepared = spawn.get_preparation_data

        def get_preparation_data(name):
            data = prepared(name)
            if data.get("init_main_from_path") == path:
                data["init_main_from_path"] = cell
            return data

        spawn.get_preparation_data = get_preparation_data

    class Finder:
        @staticmethod
        def find_spec(name, search_path=None, target=None):
            if name != "multiprocessing.spawn":
                return None
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(name, search_path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                point_at_cell(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder)


if __name__ == "__main__":
    main()
