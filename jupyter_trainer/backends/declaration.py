"""What a backend declares of itself, in a small module of its own package that imports no runtime
library (`docker/declared.py`, `slurm/declared.py`, `sagemaker/declared.py`, `host_declared.py`):
its name, its entry (the class the registry makes on first use), how `%%train_detached` chooses
it and the options it takes (`spec.options.DetachedBackend`, with their typed values), the options
of a cell magic of its own, and the names of the files it keeps in a run directory. The registry
(`backends.Backends`) collects them; nothing outside a backend's package names its options or files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..spec.options import DetachedBackend, Option


@dataclass(frozen=True)
class Declaration:
    name: str
    # "module:Class" (imported when the backend is first used), or a callable that makes the backend
    entry: str | Callable[[], Any]
    detached: DetachedBackend | None = None  # None: `%%train_detached` does not run it (SageMaker has its magic)
    magic_options: tuple[Option, ...] = ()  # the options of its own cell magic (`%%sagemaker_fit`)
    run_files: tuple[str, ...] = ()  # the files it keeps in a run directory, beside those the store names

    def __post_init__(self):
        if self.detached is not None and self.detached.name != self.name:
            raise ValueError(f"the {self.name} backend declares a detached backend named {self.detached.name!r}")

    def make(self):
        """A new instance of the backend."""
        if callable(self.entry):
            return self.entry()
        import importlib

        module, _, cls = self.entry.partition(":")
        return getattr(importlib.import_module(module), cls)()
