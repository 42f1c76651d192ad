"""jupyter_trainer: training runs that outlive the notebook, from one cell.

    %load_ext jupyter_trainer
"""

from .errors import TrainerError
from .job import Job, get_job, list_jobs
from .jobs import Status

__all__ = ["Job", "Status", "TrainerError", "get_job", "list_jobs", "load_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython):
    from .magics import TrainerMagics

    ipython.register_magics(TrainerMagics)
