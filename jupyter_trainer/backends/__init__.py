"""Where jobs run, by name: `host`, `docker`, `sagemaker` and `slurm`.

Each backend declares itself in a small module of its own package (`declaration.Declaration`:
its entry, its options with their typed values, its run files); `DECLARED` lists them, and a
`Backends` registry collects what they declare (`detached`, `magic_options`, `run_files`) and
creates each backend on first use, so loading the extension imports no runtime library.
Everything that resolves a job's backend (submitting, following, stopping, describing) is given
a registry: the magics (`TrainerMagics(shell, backends=...)`) and the CLI (`cli.run(argv,
backends=...)`) hand theirs down, `DEFAULT` when none was given. A name no registry knows is an
`UnknownBackend`, a `TrainerError` like any other. A registry can hold a backend of its own, by
name (the tests' `Backends(fake=FakeBackend())`, backends/fake.py), and be given more
declarations (`Backends(declared=(TOY,))`): a backend declared so is chosen, parsed and named
as the known ones are, with no edit outside its own module.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UnknownBackend
from ..spec.options import DetachedOptions, Option
from .declaration import Declaration
from .docker.declared import DECLARATION as DOCKER
from .host_declared import DECLARATION as HOST
from .sagemaker.declared import DECLARATION as SAGEMAKER
from .slurm.declared import DECLARATION as SLURM

if TYPE_CHECKING:
    from ..spec.job_spec import DetachedSpec
    from .base import Backend

# the known backends, in the order their options are shown (the one chosen without a switch first)
DECLARED = (DOCKER, HOST, SLURM, SAGEMAKER)
KNOWN = {declared.name: declared.entry for declared in DECLARED}  # name -> "module:Class"


class Backends:
    """Backends by name, each created once on first use; `given` ones are used as they are.
    `declared`: declarations beside (or instead of, by name) the known ones."""

    def __init__(self, declared: Iterable[Declaration] = (), **given: Backend):
        self._instances: dict[str, Backend] = dict(given)
        self.declarations: dict[str, Declaration] = {item.name: item for item in (*DECLARED, *declared)}

    def names(self) -> list[str]:
        """Every backend this registry can give: the declared ones and those it was given."""
        return sorted({*self.declarations, *self._instances})

    def get(self, name: str) -> Backend:
        if name not in self._instances:
            if name not in self.declarations:
                raise UnknownBackend(name, self.names())
            self._instances[name] = self.declarations[name].make()
        return self._instances[name]

    # -- what the backends declare, collected -------------------------------------------------

    @functools.cached_property
    def detached(self) -> DetachedOptions:
        """The backends `%%train_detached` runs, and every option it takes."""
        return DetachedOptions(
            declared.detached for declared in self.declarations.values() if declared.detached is not None
        )

    def magic_options(self, name: str) -> tuple[Option, ...]:
        """The options of the cell magic of a backend's own (`%%sagemaker_fit`: "sagemaker")."""
        return self.declarations[name].magic_options

    @functools.cached_property
    def run_files(self) -> dict[str, str]:
        """Every file a run directory may hold, by name, and whose it is (see `store.run_files`)."""
        from ..core.store import run_files

        return run_files({declared.name: declared.run_files for declared in self.declarations.values()})

    # -- specs, from what the backends declare ------------------------------------------------

    def build_spec(self, script: str, **values: Any) -> DetachedSpec:
        """`job_spec.build_spec` with this registry's backends and options."""
        from ..spec.job_spec import build_spec

        return build_spec(self.detached, script, **values)

    def detached_spec(
        self,
        script: str,
        given: Mapping[str, Any],
        config: Mapping[str, Any],
        args: Iterable[str] = (),
        hosts: Mapping[str, str] | None = None,
    ) -> DetachedSpec:
        """`job_spec.detached_spec` with this registry's backends and options."""
        from ..spec.job_spec import detached_spec

        return detached_spec(self.detached, script, given, config, args, hosts)


DEFAULT = Backends()
build_spec = DEFAULT.build_spec  # the real backends' spec builder (the tests', and a script's)
detached_spec = DEFAULT.detached_spec
