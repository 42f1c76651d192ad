"""The package's layout holds: runtime libraries stay in their backend, imports only run down the layers."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_trainer"

# Lower layers never import higher ones. A module not listed is in the layer of its package.
LAYERS = [
    {"errors", "_fs", "proc", "jobs", "checks", "options", "spec", "surface", "naming", "resources", "ignore_patterns", "wording", "credentials", "in_place", "terminal", "interrupts", "_changes"},  # pure: names, records, status rules, options, words
    {"store", "logs", "metrics", "metric_runs", "metric_columns", "plot", "metrics_cache", "compare"},  # the store, reading logs and metrics, charts
    {"backends"},  # where jobs run (every module under backends/)
    {"job", "submit", "summary", "status_checks"},  # jobs as users see them (and their status asked off the views' thread)
    {"housekeeping"},  # removing finished runs
    {"monitor", "compare_runs"},  # a job's view (and several jobs' series), as plain state
    {"widget", "compare_view"},  # the views' renderers
    {"jobs_view"},  # the live jobs table
    {"magics", "magic_help", "cli", "__init__"},  # the surfaces
]
RUNTIME_LIBRARIES = {"sagemaker", "boto3", "botocore"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # a package is named by its directory


def imports_of(path: Path) -> set[str]:
    """The modules `path` imports, absolute (relative imports resolved)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]  # relative imports start from the module's package
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            if node.module:  # `from . import x` imports x, not its package
                found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # a submodule, perhaps
    return found


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "jupyter_trainer":
        return None
    top = parts[1] if len(parts) > 1 else "__init__"
    return next((index for index, layer in enumerate(LAYERS) if top in layer), None)


def modules():
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def test_every_module_has_a_layer():
    assert [name for name in modules() if layer_of(name) is None] == []


def test_imports_only_run_down_the_layers():
    known = modules()
    upward = []
    for name, path in known.items():
        for imported in imports_of(path):
            if imported in known or imported.rsplit(".", 1)[0] in known:
                target = imported if imported in known else imported.rsplit(".", 1)[0]
                if layer_of(target) > layer_of(name):
                    upward.append(f"{name} -> {target}")
    assert upward == []


def test_only_the_sagemaker_backend_imports_the_aws_libraries():
    outside = []
    for name, path in modules().items():
        if name.startswith("jupyter_trainer.backends.sagemaker"):
            continue
        for imported in imports_of(path):
            if imported.split(".")[0] in RUNTIME_LIBRARIES:
                outside.append(f"{name} imports {imported}")
    assert outside == []


def test_only_the_docker_package_imports_docker_py():
    """docker-py and paramiko are Docker's: SageMaker's local mode, the views and the CLI ask
    backends/docker for what they need of the engine."""
    outside = []
    for name, path in modules().items():
        if name.startswith("jupyter_trainer.backends.docker"):
            continue
        for imported in imports_of(path):
            if imported.split(".")[0] in ("docker", "paramiko"):
                outside.append(f"{name} imports {imported}")
    assert outside == []


def test_every_known_backend_follows_the_protocol():
    """Every member of backends.base.Backend, with its parameters, on every known backend (and the
    tests' fake): a backend missing one, or taking other arguments, fails here, not in a user's view."""
    import importlib
    import inspect

    from jupyter_trainer.backends import KNOWN
    from jupyter_trainer.backends.base import Backend
    from jupyter_trainer.backends.fake import FakeBackend
    from jupyter_trainer.jobs import JobRecord

    members = {name for name in vars(Backend) if not name.startswith("_")} | set(Backend.__annotations__)
    methods = {name: inspect.signature(member) for name, member in vars(Backend).items() if callable(member) and not name.startswith("_")}
    assert {"describe_host", "describe_where", "remove_unused_containers", "usage", "lingering"} <= members
    backends = {name: getattr(importlib.import_module(where.partition(":")[0]), where.partition(":")[2])() for name, where in KNOWN.items()}
    backends["fake"] = FakeBackend()
    for name, backend in backends.items():
        assert backend.name == name  # the registry's name is the backend's own
        for member in members:
            if member == "remove_unused_containers" and not backend.has_containers:
                continue
            assert hasattr(backend, member), (name, member)
        for method, signature in methods.items():
            if not hasattr(backend, method):
                continue
            own = inspect.signature(getattr(type(backend), method))
            assert list(own.parameters) == list(signature.parameters), (name, method, own, signature)
        assert isinstance(backend.describe_where(JobRecord(name="x", backend=name)), str)  # not launched yet
        assert backend.describe_host(JobRecord(name="x", backend=name)) in (None, "local")
