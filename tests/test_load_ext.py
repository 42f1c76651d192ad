"""What `%load_ext jupyter_trainer` imports in a fresh shell: the magics' declarations and nothing more.

Registering the magics is paid in every kernel that loads the extension; the job model, the
backends, the views, the checks and what they import are paid by the first magic that runs.
"""

from conftest import run_python

# the package's modules that registering the magics needs: the magics, the shared options, and the
# registry with each backend's declarations (not the backends themselves)
REGISTERING = {
    "jupyter_trainer", "jupyter_trainer.errors", "jupyter_trainer.surfaces.magics", "jupyter_trainer.spec", "jupyter_trainer.surfaces",
    "jupyter_trainer.spec.options", "jupyter_trainer.surfaces.magic_help", "jupyter_trainer.backends", "jupyter_trainer.backends.declaration",
}  # fmt: skip


def declaring() -> set[str]:
    """Each known backend's declaration module and the packages above it in backends/ (a backend
    added to the registry brings its own: no edit here)."""
    import importlib

    from jupyter_trainer.backends import DECLARED

    found = set()
    for declared in DECLARED:
        package = f"jupyter_trainer.backends.{declared.name}"
        try:
            module = importlib.import_module(f"{package}.declared")
        except ModuleNotFoundError:  # a one-module backend declares itself beside it (host_declared.py)
            module = importlib.import_module(f"{package}_declared")
        assert module.DECLARATION is declared
        parts = module.__name__.split(".")
        found.update(".".join(parts[:end]) for end in range(3, len(parts) + 1))
    return found
# outside the package: IPython's %load_ext itself, the magics' argument parsers (and what
# argparse's translated words look up)
OTHERS_ALLOWED = {"IPython.core.magics.extension", "IPython.core.magic_arguments", "locale", "_locale"}

NEWLY_IMPORTED = (
    "import sys\n"
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "ip = InteractiveShell.instance()\n"
    "before = set(sys.modules)\n"
    "ip.run_line_magic('load_ext', 'jupyter_trainer')\n"
    "print(' '.join(sorted(set(sys.modules) - before)))\n"
)


def newly_imported() -> set[str]:
    result = run_python(NEWLY_IMPORTED, check=True)
    return set(result.stdout.split())


def test_loading_imports_only_the_magics_declarations():
    new = newly_imported()
    ours = {name for name in new if name.split(".")[0] == "jupyter_trainer"}
    assert ours == REGISTERING | declaring()
    assert new - ours <= OTHERS_ALLOWED, sorted(new - ours)


def test_every_declared_check_names_a_function():
    """The checks are named ("module:function") so that declaring the options imports none of
    them: each name must still lead to its function."""
    from jupyter_trainer.backends import DEFAULT
    from jupyter_trainer.spec.options import JOB, declared_function

    sagemaker = DEFAULT.magic_options("sagemaker")
    named = [option for option in (*JOB, *DEFAULT.detached.options, *sagemaker) if isinstance(option.parse, str)]
    assert len(named) >= 10
    for option in named:
        assert callable(declared_function(option.parse)), option.flag
