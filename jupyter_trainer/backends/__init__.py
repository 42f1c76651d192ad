"""Where jobs run. Backends are created on first use, so loading the extension imports no runtime library."""

from __future__ import annotations

from .base import Backend

_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    if name not in _instances:
        _instances[name] = _create(name)
    return _instances[name]


def _create(name: str) -> Backend:
    if name == "host":
        from .host import HostBackend

        return HostBackend()
    if name == "docker":
        from .docker import DockerBackend

        return DockerBackend()
    if name == "sagemaker":
        from .sagemaker import SageMakerBackend

        return SageMakerBackend()
    if name == "fake":
        from .fake import FakeBackend

        return FakeBackend()
    raise ValueError(f"unknown backend {name!r}")


def register_backend(name: str, backend: Backend) -> None:
    """Use `backend` for jobs recorded under `name` (tests plug in fakes this way)."""
    _instances[name] = backend
