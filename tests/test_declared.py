"""A backend owns its options and its files: each declares them in a small module of its own
package (`declared.py`, `host_declared.py`), and the registry collects them. A pretend backend
handed to a registry is chosen, parsed, checked and given its run files with no edit elsewhere."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from jupyter_trainer.backends import DECLARED, DEFAULT, KNOWN, Backends
from jupyter_trainer.backends.declaration import Declaration
from jupyter_trainer.backends.fake import FakeBackend
from jupyter_trainer.core import store as store_module
from jupyter_trainer.errors import InvalidOption, TrainerError
from jupyter_trainer.spec.options import ENV, INTERPRETER, NOTIFY, WORKDIR, BackendOptions, DetachedBackend, Option

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_trainer"


def declared_module(name: str) -> str:
    """Where a known backend declares itself: its package's declared.py (host.py's is host_declared.py)."""
    return f"jupyter_trainer.backends.{name}_declared" if (PACKAGE / "backends" / f"{name}.py").exists() else f"jupyter_trainer.backends.{name}.declared"


def test_every_known_backend_declares_itself_in_its_own_package():
    # (the four this project ships; a backend added beside them needs no edit here)
    assert [declared.name for declared in DECLARED] == list(KNOWN) and set(KNOWN) >= {"docker", "host", "slurm", "sagemaker"}
    for declared in DECLARED:
        assert importlib.import_module(declared_module(declared.name)).DECLARATION is declared
        own = f"jupyter_trainer.backends.{declared.name}"
        assert declared.entry.partition(":")[0] in (own, f"{own}.backend"), declared.entry
        assert type(declared.make()).__module__.startswith(own)


def test_every_detached_backends_own_options_are_typed_values_of_its_own():
    detached = [declared.detached for declared in DECLARED if declared.detached is not None]
    assert {backend.name for backend in detached} >= {"docker", "host", "slurm"} and "sagemaker" not in {backend.name for backend in detached}
    shared = {WORKDIR.dest, ENV.dest, INTERPRETER.dest, NOTIFY.dest, "gpus", "queue"}
    for backend in detached:
        typed = backend.typed
        assert issubclass(typed, BackendOptions) and dataclasses.is_dataclass(typed) and typed.__dataclass_params__.frozen
        own = {option.dest for option in backend.options} - shared - {backend.switch} - {"docker_host"}  # settled into the engine
        assert own <= {field.name for field in dataclasses.fields(typed)}, backend.name
        # nothing given, nothing stored under "backend_options": cells without them keep their fingerprints
        assert "backend_options" not in typed().stored()
    assert DEFAULT.detached.options == tuple(DEFAULT.detached.options)  # one order, collected once
    assert DEFAULT.build_spec("print(1)", slurm=True, workdir="/tmp", nodes=2).options == importlib.import_module(
        "jupyter_trainer.backends.slurm.declared"
    ).SlurmOptions(nodes=2)


def test_every_run_file_is_named_once_by_its_owner():
    owners = Backends().run_files
    for declared in DECLARED:
        assert all(owners[name] == declared.name for name in declared.run_files)
    assert {name for name, owner in owners.items() if owner == store_module.STORE} == set(store_module.STORE_FILES)
    assert owners["restart"] == "docker" and owners["slurm_env"] == "slurm" and owners["cloudwatch.json"] == "sagemaker"
    # the store, the options and the spec builder name no backend's module nor any of its files
    for module in ("core/store.py", "spec/options.py", "spec/job_spec.py"):
        text = (PACKAGE / module).read_text()
        assert "jupyter_trainer.backends" not in text, module
        assert not [name for declared in DECLARED for name in declared.run_files if f'"{name}"' in text], module


# -- a pretend backend, declared as the known ones are, handed to a registry ------------------------


def _nice(value):
    if value is not None and not 0 <= value <= 19:
        raise InvalidOption(f"--pretend-nice expects 0 to 19, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class PretendOptions(BackendOptions):
    nice: int | None = None
    pretend_queue: str | None = None


PRETEND_FILE = "pretend_state"


class PretendBackend(FakeBackend):
    name = "pretend"

    def __init__(self):
        super().__init__()
        self.specs = []

    def launch(self, record, run_dir, spec):
        self.specs.append(spec)
        (run_dir / PRETEND_FILE).write_text(f"{spec.options.nice}\n")
        return super().launch(record, run_dir, spec)


PRETEND_SWITCH = Option("pretend", "--pretend", "run on the pretend backend", kind="switch", config=True, default=False)
PRETEND_OPTIONS = (
    Option("nice", "--pretend-nice", "with --pretend: how nice", "N", "int", parse=f"{__name__}:_nice"),
    Option("pretend_queue", "--pretend-queue", "with --pretend: its queue", "Q", config=True),
)
PRETEND = Declaration(
    "pretend", entry=PretendBackend, run_files=(PRETEND_FILE,),
    detached=DetachedBackend("pretend", options=(WORKDIR, ENV, INTERPRETER, NOTIFY, PRETEND_SWITCH, *PRETEND_OPTIONS), switch="pretend",
                             lacks="runs without a container", typed=PretendOptions),
)  # fmt: skip


def test_a_pretend_backend_handed_to_a_registry_is_parsed_checked_and_given_its_files(home, store, workdir, capsys, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_trainer.surfaces.cli import run
    from jupyter_trainer.surfaces.magics import TrainerMagics

    monkeypatch.chdir(workdir)
    backends = Backends(declared=(PRETEND,))
    assert backends.run_files[PRETEND_FILE] == "pretend" and PRETEND_FILE not in DEFAULT.run_files
    assert [option.flag for option in backends.detached.options][-3:] == ["--pretend", "--pretend-nice", "--pretend-queue"]
    script = workdir / "train.py"
    script.write_text("print(1)\n")

    # the CLI parses its options and the spec holds them, typed; the run holds its file
    assert run(["submit", str(script), "--pretend", "--pretend-nice", "3", "--name", "by-cli"], store, backends) == 0
    pretend = backends.get("pretend")
    (spec,) = pretend.specs
    assert spec.backend == "pretend" and spec.options == PretendOptions(nice=3)
    record = store.load("by-cli", 1)
    assert record.options["backend_options"] == {"nice": 3} and (store.run_dir("by-cli", 1) / PRETEND_FILE).read_text() == "3\n"

    # the magics too, by the registry they were given
    magics = TrainerMagics(InteractiveShell.instance(), store=store, backends=backends)
    magics.train_detached("--pretend --pretend-queue fast --no-widget --name by-magic", "print(2)\n")
    assert pretend.specs[-1].options == PretendOptions(pretend_queue="fast")

    # its check is its own, and a bad value one line
    with pytest.raises(TrainerError, match="--pretend-nice expects 0 to 19, got 40"):
        run(["submit", str(script), "--pretend", "--pretend-nice", "40"], store, backends)
    # given without its switch, its option names the switch, as a known backend's does
    with pytest.raises(InvalidOption, match="--pretend-nice is an option of --pretend"):
        backends.build_spec("print(1)", host=True, nice=1)
    # the real registry knows none of it
    with pytest.raises(TrainerError, match="unrecognized arguments: --pretend"):
        run(["submit", str(script), "--pretend"], store)


def test_a_run_file_two_owners_would_share_is_refused():
    clash = dataclasses.replace(PRETEND, run_files=("output.log",))
    with pytest.raises(ValueError, match="'output.log', which is the store's"):
        Backends(declared=(clash,)).run_files
    twice = Declaration("other", entry=FakeBackend, run_files=(PRETEND_FILE,))
    with pytest.raises(ValueError, match="which is pretend's"):
        Backends(declared=(PRETEND, twice)).run_files
    with pytest.raises(ValueError, match="not a plain name"):
        Backends(declared=(dataclasses.replace(PRETEND, run_files=("../record.json",)),)).run_files
