"""Where jobs run, by name: `host`, `docker`, `sagemaker` and `slurm`.

A `Backends` registry creates each backend on first use, so loading the
extension imports no runtime library. Everything that resolves a job's backend
(submitting, following, stopping, describing) is given a registry: the magics
(`TrainerMagics(shell, backends=...)`) and the CLI (`cli.run(argv, backends=...)`)
hand theirs down, `DEFAULT` when none was given. A name no registry knows is an
`UnknownBackend`, a `TrainerError` like any other. A registry can hold a backend
of its own, by name: the tests' `Backends(fake=FakeBackend())` (backends/fake.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import UnknownBackend

if TYPE_CHECKING:
    from .base import Backend

# name -> "module:Class", imported when the backend is first used
KNOWN = {
    "host": "jupyter_trainer.backends.host:HostBackend",
    "docker": "jupyter_trainer.backends.docker.backend:DockerBackend",
    "sagemaker": "jupyter_trainer.backends.sagemaker:SageMakerBackend",
    "slurm": "jupyter_trainer.backends.slurm:SlurmBackend",
}


class Backends:
    """Backends by name, each created once on first use; `given` ones are used as they are."""

    def __init__(self, **given: Backend):
        self._instances: dict[str, Backend] = dict(given)

    def names(self) -> list[str]:
        """Every backend this registry can give: the known ones and those it was given."""
        return sorted({*KNOWN, *self._instances})

    def get(self, name: str) -> Backend:
        if name not in self._instances:
            if name not in KNOWN:
                raise UnknownBackend(name, self.names())
            module, _, cls = KNOWN[name].partition(":")
            self._instances[name] = getattr(importlib.import_module(module), cls)()
        return self._instances[name]


DEFAULT = Backends()
