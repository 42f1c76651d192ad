"""jupyter_trainer: training runs that outlive the notebook, from one cell.

%load_ext jupyter_trainer
"""

from .errors import TrainerError

__all__ = ["Job", "Status", "TrainerError", "get_job", "list_jobs", "load_ipython_extension"]
__version__ = "0.1.0"

# The job model is imported at first use: `%load_ext` needs only the magics' declarations.
_LAZY = {"Job": "jobs.job", "get_job": "jobs.job", "list_jobs": "jobs.job", "Status": "core.record"}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython):
    from .surfaces.magics import TrainerMagics

    ipython.register_magics(TrainerMagics)
