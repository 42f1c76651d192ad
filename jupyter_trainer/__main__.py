"""`python -m jupyter_trainer ...` is the `jupyter-trainer` command."""

import sys

from .surfaces.cli import main

sys.exit(main())
