"""What `%load_ext jupyter_trainer` costs in a fresh kernel, against `import ipywidgets` in one as fresh.

Each measure is a new kernel, started as Jupyter starts one (ipykernel, through jupyter_client),
that runs one cell: the time inside the kernel from its started shell to the extension registered,
or to ipywidgets imported, wall-clock and in CPU time of the kernel's main thread (which leaves out
the waits of a loaded machine). The arms alternate, each in a kernel of its own, and their medians
are compared. The kernels import this checkout (PYTHONPATH, from a directory of their own), whatever
the environment installed.

The bytecode each arm reads is settled, not left to whichever files earlier runs wrote: the
kernels read and write it in a cache of this benchmark's own (PYTHONPYCACHEPREFIX), filled by a
first kernel that ran both arms, then written no more (PYTHONDONTWRITEBYTECODE). Two conditions:

* bytecode cached: what a kernel pays with an installed package (pip writes its bytecode);
* this package compiled from source: its bytecode removed from the cache, so each kernel compiles
  its modules, as a checkout run with PYTHONDONTWRITEBYTECODE=1 does at every start (and any
  kernel, once, after an upgrade); ipywidgets and IPython keep theirs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from common import Comparison

CHECKOUT = Path(__file__).resolve().parent.parent
LOAD = "get_ipython().run_line_magic('load_ext', 'jupyter_trainer')"
WIDGETS = "import ipywidgets"
HEAVY = ("sagemaker", "boto3", "botocore", "docker", "ipywidgets")  # none of them is the extension's to import
CELL = """import sys as _sys, time as _time
_start, _cpu = _time.perf_counter(), _time.thread_time()
{statement}
_elapsed, _cpu = _time.perf_counter() - _start, _time.thread_time() - _cpu
print(_elapsed, _cpu, ",".join(m for m in {heavy!r} if m in _sys.modules) or "-")
"""


def in_fresh_kernel(statement: str, env: dict[str, str], cwd: str) -> tuple[float, float, list[str]]:
    """Seconds `statement` took in a kernel started for it alone (wall-clock, and its thread's CPU
    time), and the heavy modules then loaded."""
    from jupyter_client import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = manager.client()
    printed: list[str] = []
    try:
        client.start_channels()
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(
            CELL.format(statement=statement, heavy=HEAVY),
            output_hook=lambda message: printed.append(message["content"]["text"]) if message["msg_type"] == "stream" else None,
            timeout=120,
        )
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{statement!r} failed in the kernel: {reply['content'].get('evalue')}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    elapsed, cpu, loaded = "".join(printed).split()[-3:]
    return float(elapsed), float(cpu), [] if loaded == "-" else loaded.split(",")


def bench_load(rounds: int) -> list[Comparison]:
    work = Path(tempfile.mkdtemp(prefix="jt-bench-load-"))
    cache, cwd = work / "bytecode", work / "cwd"
    cwd.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")])),
        "PYTHONPYCACHEPREFIX": str(cache),
        "IPYTHONDIR": str(work / "ipython"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for statement in (LOAD, WIDGETS):  # fills the cache
        in_fresh_kernel(statement, env, str(cwd))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    ours = cache.joinpath(*(CHECKOUT / "jupyter_trainer").parts[1:])  # the cache mirrors the source's path
    if not ours.is_dir():
        raise RuntimeError(f"no bytecode of this package in {cache}: the cache is not where it was looked for")

    results = []
    for condition in ("bytecode cached", "this package compiled from source"):
        if condition != "bytecode cached":
            shutil.rmtree(ours)
        samples: dict[str, list[tuple[float, float]]] = {LOAD: [], WIDGETS: []}
        loaded: set[str] = set()
        for index in range(rounds):  # alternating, each in a kernel of its own
            for statement in (LOAD, WIDGETS) if index % 2 == 0 else (WIDGETS, LOAD):
                elapsed, cpu, heavy = in_fresh_kernel(statement, env, str(cwd))
                samples[statement].append((elapsed, cpu))
                if statement == LOAD:
                    loaded.update(heavy)
        name = f"%load_ext jupyter_trainer vs import ipywidgets, each in a fresh kernel, {condition}"
        if loaded:
            name += f" (imported: {', '.join(sorted(loaded))})"
        for measure, which in (("wall-clock", 0), ("CPU time", 1)):  # CPU time: what a loaded machine's waits leave out
            ours_median = statistics.median(sample[which] for sample in samples[LOAD])
            theirs_median = statistics.median(sample[which] for sample in samples[WIDGETS])
            results.append(Comparison(f"{name}: {measure}", ours_median, theirs_median, "<= 1.2x", 1.2))
    shutil.rmtree(work, ignore_errors=True)
    return results
