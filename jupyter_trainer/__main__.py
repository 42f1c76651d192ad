"""`python -m jupyter_trainer ...` is the `jupyter-trainer` command."""

from .surfaces.cli import main

main()
