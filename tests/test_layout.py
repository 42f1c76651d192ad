"""The package's layout holds: its folders are its architecture (wings), imports run one way
between them and never in a circle, no module grows too long to read, and runtime libraries stay in
their backend."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_trainer"

# The wings, lowest first: a wing imports only from the wings before it (and from itself). A module
# directly in jupyter_trainer/ is named by itself; any other by the folder it is in.
WINGS = [
    {"errors", "surface"},  # the error tree, and the one setting of which surface (magics or CLI) speaks
    {"core"},  # the job record and its statuses, the store, file primitives, processes, words
    {"spec"},  # what a cell or a line asks for: options, checks, the spec
    {"logs"},  # reading a log, its terminal screen, the watch of its directory
    {"metrics"},  # the metric reader, runs of lines, columns, the cache, comparison rules
    {"backends"},  # where jobs run: the protocols, the registry, host, docker, sagemaker, slurm
    {"jobs"},  # a job as users handle it: submit, look, stop, remove
    {"view"},  # snapshots, live views and their poller, charts, tables, text
    {"surfaces"},  # magics, their help, the command line
    {"__init__", "__main__"},  # the public names, and `python -m jupyter_trainer`
]
TOP_LEVEL_MODULES = 6  # at most this many modules directly in jupyter_trainer/ (the rest live in wings)
MODULE_LINES = 600  # no module longer
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


def wing_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "jupyter_trainer":
        return None
    top = parts[1] if len(parts) > 1 else "__init__"
    return next((index for index, wing in enumerate(WINGS) if top in wing), None)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports."""
    known = modules()
    graph = {}
    for name, path in known.items():
        targets = set()
        for imported in imports_of(path):
            target = imported if imported in known else imported.rsplit(".", 1)[0]
            if target in known and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def test_every_module_is_in_a_wing():
    assert [name for name in modules() if wing_of(name) is None] == []


def test_few_modules_live_directly_in_the_package():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top


def test_no_module_is_too_long_to_read():
    long = {name: lines for name, path in modules().items() if (lines := len(path.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_imports_run_one_way_between_wings():
    upward = [f"{name} -> {target}" for name, targets in import_graph().items() for target in targets if wing_of(target) > wing_of(name)]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph()
    circles, done = [], set()

    def visit(module, path):  # depth first: a module met again on the path closes a circle
        if module in path:
            circles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert circles == []


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


def known_backends() -> dict:
    """An instance of every backend the registry knows, and of the tests' fake, by name."""
    import importlib

    from jupyter_trainer.backends import KNOWN
    from jupyter_trainer.backends.fake import FakeBackend

    backends = {name: getattr(importlib.import_module(where.partition(":")[0]), where.partition(":")[2])() for name, where in KNOWN.items()}
    backends["fake"] = FakeBackend()
    return backends


def public_methods(protocol) -> dict:
    """A protocol's methods (and properties) by name, with their signatures."""
    import inspect

    found = {}
    for name, member in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            member = member.fget
        if callable(member):
            found[name] = inspect.signature(member)
    return found


def assert_follows(cls, protocol, exempt=()) -> None:
    """`cls` has every member of `protocol` (but `exempt`), each method taking the same parameters."""
    import inspect

    members = {name for name in vars(protocol) if not name.startswith("_")} | set(getattr(protocol, "__annotations__", {}))
    for member in members - set(exempt):
        assert hasattr(cls, member) or member in getattr(cls, "__annotations__", {}), (cls.__name__, member)
    for method, signature in public_methods(protocol).items():
        if method in exempt:
            continue
        own = getattr(cls, method)
        own = inspect.signature(own.fget if isinstance(own, property) else own)
        assert list(own.parameters) == list(signature.parameters), (cls.__name__, method, own, signature)


def test_every_known_backend_follows_the_protocol():
    """Every member of backends.base.Backend, with its parameters, on every known backend (and the
    tests' fake), which inherits BackendBase's defaults of the members not every backend needs: a
    backend missing one, or taking other arguments, fails here, not in a user's view."""
    from jupyter_trainer.backends.base import Backend, BackendBase
    from jupyter_trainer.core.record import JobRecord

    members = {name for name in vars(Backend) if not name.startswith("_")} | set(Backend.__annotations__)
    assert {"describe_host", "describe_where", "remove_unused_containers", "usage", "lingering"} <= members
    assert {"watched_status_interval", "polling", "status_fields"} <= members  # with defaults in BackendBase
    for name, backend in known_backends().items():
        assert backend.name == name  # the registry's name is the backend's own
        assert isinstance(backend, BackendBase), name
        assert_follows(type(backend), Backend, exempt=() if backend.has_containers else ("remove_unused_containers",))
        for member in Backend.__annotations__:
            assert hasattr(backend, member), (name, member)
        record = JobRecord(name="x", backend=name)  # not launched yet
        assert isinstance(backend.describe_where(record), str)
        assert backend.describe_host(record) in (None, "local")
        assert isinstance(backend.status_fields(record), dict)
        assert isinstance(backend.watched_status_interval, float) and backend.watched_status_interval >= backend.status_interval
        with backend.polling():
            pass


def log_source_classes() -> dict:
    """Every class of the package that reads a log by offset (a `read(self, offset, limit)`), by
    its module and name: each is a log source, found without a list to forget one in."""
    import importlib

    found = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or name == "jupyter_trainer.logs.source":
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "read" and [arg.arg for arg in item.args.args][:2] == ["self", "offset"]:
                    found[f"{name}.{node.name}"] = getattr(importlib.import_module(name), node.name)
    return found


def test_every_log_source_follows_the_protocol():
    """Every log source of the package (a file here, a container's through its engine, a remote
    container's stream, CloudWatch's copy; Slurm's, SageMaker's local ones and the fake's are files)
    inherits LogSourceBase and has every member of logs.source.LogSource with its parameters; one
    that tells of its news has every member of TellingLog too."""
    from jupyter_trainer.backends.base import FileLogSource
    from jupyter_trainer.logs.source import LogSource, LogSourceBase, TellingLog

    assert {"size", "read", "local_file", "modified", "settle"} <= set(public_methods(LogSource))
    sources = log_source_classes()
    assert {"FileLogSource", "ContainerLogSource", "StreamedLog", "SyncedLogSource"} <= {name.rsplit(".", 1)[1] for name in sources}
    for name, cls in sources.items():
        assert issubclass(cls, LogSourceBase), name
        assert_follows(cls, LogSource)
        if "listen" in vars(cls):
            assert_follows(cls, TellingLog)
    telling = {name.rsplit(".", 1)[1] for name, cls in sources.items() if any("listen" in vars(base) for base in cls.__mro__)}
    assert "StreamedLog" in telling and "FileLogSource" not in telling
    assert not isinstance(FileLogSource("x"), TellingLog)  # a view watches its file instead


def test_no_module_probes_a_backend_or_a_log_source():
    """What the core asks of a backend, a log source or a spec is declared on their protocols
    (backends/base.py, logs/source.py) and called as declared: outside backends/ (where the
    libraries' own objects are probed), no getattr or hasattr looks at a backend or a log source,
    nor for a member the protocols declare. A probe that comes back fails here."""
    from jupyter_trainer.backends.base import Backend, BackendBase, JobSpec
    from jupyter_trainer.logs.source import LogSource, LogSourceBase, TellingLog

    declared = set()
    for protocol in (Backend, BackendBase, JobSpec, LogSource, LogSourceBase, TellingLog):
        declared |= {name for name in vars(protocol) if not name.startswith("_")} | set(getattr(protocol, "__annotations__", {}))
    seam = re.compile(r"(?<![A-Za-z])(backends?|backend_impl|(log_)?sources?|(log_)?streams?)(?![A-Za-z])")
    probes = []
    for name, path in modules().items():
        if name.startswith("jupyter_trainer.backends"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and node.args):
                continue
            looked_at = ast.unparse(node.args[0])
            looked_for = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            if seam.search(looked_at) or looked_for in declared:
                probes.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []


def test_every_module_is_named_in_the_map_of_the_package():
    """docs/how-it-works.md's map names each module under its folder: a module added or moved
    without it fails here."""
    text = (PACKAGE.parent / "docs" / "how-it-works.md").read_text()
    block = text.split("## The layout", 1)[1].split("```", 2)[1]
    named, folders = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        entry = line.split()[0]
        folders[depth:] = []
        if entry.endswith("/"):
            folders.append(entry)
        else:
            named.add("".join(folders) + entry)
    on_disk = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")}
    unnamed_packages = {name for name in on_disk if name.endswith("__init__.py") and name.count("/") == 1}  # a wing's doc is its own
    assert sorted(on_disk - named - unnamed_packages) == [] and sorted(named - on_disk) == []
