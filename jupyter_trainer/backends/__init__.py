"""Where jobs run, by name: `host`, `docker`, `sagemaker` and `fake`.

A `Backends` registry creates each backend on first use, so loading the
extension imports no runtime library. Everything that resolves a job's backend
(submitting, following, stopping) takes a registry; `DEFAULT` serves the
magics and the CLI, and tests pass one holding a fake instead.
"""

from __future__ import annotations

import importlib

from .base import Backend

# name -> "module:Class", imported when the backend is first used
KNOWN = {
    "host": "jupyter_trainer.backends.host:HostBackend",
    "docker": "jupyter_trainer.backends.docker:DockerBackend",
    "sagemaker": "jupyter_trainer.backends.sagemaker:SageMakerBackend",
    "fake": "jupyter_trainer.backends.fake:FakeBackend",
}


class UnknownBackend(ValueError):
    pass


class Backends:
    """Backends by name, each created once on first use; `given` ones are used as they are."""

    def __init__(self, **given: Backend):
        self._instances: dict[str, Backend] = dict(given)

    def get(self, name: str) -> Backend:
        if name not in self._instances:
            if name not in KNOWN:
                raise UnknownBackend(name)
            module, _, cls = KNOWN[name].partition(":")
            self._instances[name] = getattr(importlib.import_module(module), cls)()
        return self._instances[name]


DEFAULT = Backends()
