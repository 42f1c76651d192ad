"""A Slurm cluster of the tests' own: munged, slurmctld and slurmd on this machine (one node), and
optionally slurmdbd over a private MariaDB, all under one temporary directory.

Everything it starts has its own ports, spool, state, munge socket and key, and its output goes to
files under that directory; nothing of the machine's own Slurm or munge (if any) is used or touched.

    cluster = SlurmCluster(accounting=False)
    cluster.start()               # SLURM_CONF=cluster.conf for the commands (cluster.env())
    cluster.stop_controller(); cluster.start_controller()
    cluster.close()               # stops all it started, removes its directory

Needs root and Debian's slurm-wlm and munge (slurmdbd and mariadb-server for accounting);
`missing()` says what lacks. The node runs jobs with ProctrackType=proctrack/linuxproc and
TaskPlugin=task/none, and enforces --mem with jobacct_gather/linux's OverMemoryKill (polled every
second): a job over its memory ends OUT_OF_MEMORY.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

START_TIMEOUT = 60.0
NODE = "jtnode"
MEMORY_MB = 2000

SLURM_CONF = """\
ClusterName={cluster}
SlurmctldHost={host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=1
JobAcctGatherParams=OverMemoryKill
{accounting}
JobCompType=jobcomp/none
KillWait=5
MinJobAge={min_job_age}
InactiveLimit=0
SlurmctldTimeout=300
SlurmdTimeout=300
MessageTimeout=5
TCPTimeout=2
DefMemPerNode=500
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=second Nodes=ALL MaxTime=INFINITE State=UP
"""

ACCOUNTING = """\
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={root}/munge/munge.sock
AccountingStorageEnforce=associations"""

SLURMDBD_CONF = """\
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
LogFile={root}/slurmdbd.log
PidFile={root}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageLoc=slurm_acct
StorageUser=root
"""


def missing(accounting: bool = False) -> str | None:
    """Why no cluster can run here, or None."""
    needed = [("slurmctld", "slurm-wlm"), ("slurmd", "slurm-wlm"), ("sbatch", "slurm-wlm"), ("munged", "munge"), ("mungekey", "munge")]
    if accounting:
        needed += [("slurmdbd", "slurmdbd"), ("mariadbd", "mariadb-server"), ("mariadb-install-db", "mariadb-server")]
    for binary, package in needed:
        if shutil.which(binary) is None and not os.path.exists(f"/usr/sbin/{binary}"):
            return f"no `{binary}` (Debian package {package})"
    if os.geteuid() != 0:
        return "slurmd runs jobs as their users: it needs root"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self, accounting: bool = False, min_job_age: int = 10, cluster: str = "jt"):
        # short: the munge socket's path must fit a unix socket's 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="jt-slurm-"))
        os.chmod(self.root, 0o755)  # jobs (any user) read slurm.conf
        self.accounting = accounting
        self.cluster = cluster
        self.conf = self.root / "slurm.conf"
        self.ctld_port, self.slurmd_port = free_port(), free_port()
        self.dbd_port = free_port() if accounting else None
        self.db_port = free_port() if accounting else None
        self.min_job_age = min_job_age
        self._procs: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log(self, name: str) -> Path:
        return self.root / f"{name}.out"

    # -- the daemons -------------------------------------------------------

    def start(self) -> "SlurmCluster":
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir()
        os.chmod(self.root / "munge", 0o755)
        self._write_config()
        self._start_munge()
        if self.accounting:
            self._start_database()
            self._start("slurmdbd", [_binary("slurmdbd"), "-D"])  # slurmdbd.conf beside SLURM_CONF
            self._wait_for_port(self.dbd_port, "slurmdbd")
        self.start_controller()
        self.start_nodes()
        return self

    def _write_config(self) -> None:
        accounting = ACCOUNTING.format(dbd_port=self.dbd_port, root=self.root) if self.accounting else "AccountingStorageType=accounting_storage/none"
        nodes = self.node_lines()
        self.conf.write_text(
            SLURM_CONF.format(
                cluster=self.cluster, host=socket.gethostname(), ctld_port=self.ctld_port, slurmd_port=self.slurmd_port,
                root=self.root, accounting=accounting, ctld_addr=self.ctld_addr, min_job_age=self.min_job_age, nodes=nodes,
            )
        )  # fmt: skip
        if self.accounting:
            dbd = self.root / "slurmdbd.conf"
            dbd.write_text(SLURMDBD_CONF.format(root=self.root, dbd_port=self.dbd_port, db_port=self.db_port))
            os.chmod(dbd, 0o600)

    ctld_addr = "127.0.0.1"  # where the nodes and the commands reach slurmctld

    def node_lines(self) -> str:
        return f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={MEMORY_MB} State=UNKNOWN"

    def start_nodes(self) -> None:
        self._start("slurmd", [_binary("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])
        self.wait_for_node()

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        subprocess.run([_binary("mungekey"), "-c", "-k", str(munge / "munge.key")], check=True, capture_output=True)
        os.chmod(munge / "munge.key", 0o400)
        self._start(
            "munged",
            [_binary("munged"), "-F", "--force", f"--socket={munge}/munge.sock", f"--key-file={munge}/munge.key",
             f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not (munge / "munge.sock").exists():
            self._check_alive("munged")
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: see {self.log('munged')}")
            time.sleep(0.1)

    def _start_database(self) -> None:
        db = self.root / "db"
        db.mkdir()
        subprocess.run(
            [_binary("mariadb-install-db"), f"--datadir={db}/data", "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True, capture_output=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self._start(
            "mariadbd",
            [_binary("mariadbd"), "--no-defaults", f"--datadir={db}/data", f"--socket={db}/mysqld.sock", "--bind-address=127.0.0.1", f"--port={self.db_port}", "--skip-name-resolve",
             "--user=root", f"--pid-file={db}/mysqld.pid", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M"],
        )  # fmt: skip
        self._wait_for_port(self.db_port, "mariadbd")

    def start_controller(self) -> None:
        args = [_binary("slurmctld"), "-D", "-f", str(self.conf)]
        if "slurmctld" not in self._procs:
            args.append("-c")  # the first start: a clean state
        self._start("slurmctld", args)
        self._wait_for_port(self.ctld_port, "slurmctld")
        if self.accounting and not getattr(self, "_registered", False):
            self._register_cluster()

    def _register_cluster(self) -> None:
        sacctmgr = [_binary("sacctmgr"), "-i"]
        env = {**os.environ, **self.env()}
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            done = subprocess.run([*sacctmgr, "add", "cluster", self.cluster], env=env, capture_output=True, text=True)
            if done.returncode == 0 or "already exists" in (done.stdout + done.stderr):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"sacctmgr add cluster failed: {done.stdout}{done.stderr}")
            time.sleep(0.5)
        subprocess.run([*sacctmgr, "add", "account", "research"], env=env, capture_output=True)
        subprocess.run([*sacctmgr, "add", "user", "root", "account=research"], env=env, capture_output=True)
        self._registered = True
        # slurmctld registers with slurmdbd as it starts; it knows the new cluster after a restart
        self.stop_controller()
        self._start("slurmctld", [_binary("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait_for_port(self.ctld_port, "slurmctld")

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def wait_for_node(self, node: str = NODE) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            state = self.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                return
            if state.startswith("down") or state.startswith("drain"):
                self.run("scontrol", "update", f"nodename={node}", "state=resume")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node} is {state!r}: see {self.log('slurmd')} and {self.root}/slurmd-{node}.log")
            time.sleep(0.3)

    def run(self, *command: str, check: bool = False) -> subprocess.CompletedProcess:
        command = (shutil.which(command[0], path="/usr/bin:/usr/sbin:/bin:/sbin") or command[0], *command[1:])
        return subprocess.run(command, env={**os.environ, **self.env()}, capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL, timeout=60)

    def _start(self, name: str, args: list[str]) -> None:
        out = open(self.log(name), "ab")
        try:
            self._procs[name] = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env()}, start_new_session=True
            )
        finally:
            out.close()

    def _check_alive(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: see {self.log(name)}")

    def _wait_for_port(self, port: int, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self._check_alive(name)
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} does not listen on {port}: see {self.log(name)}")
            time.sleep(0.2)

    def _stop(self, name: str, timeout: float = 30.0) -> None:
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def close(self) -> None:
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            # nothing of the tests' left running on the node
            self.run("scancel", "--full", "--user=root")
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            self._stop(name)
        self._kill_leftover_steps()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_steps(self) -> None:
        """slurmstepd processes of this cluster's node that outlived its slurmd."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"slurmstepd" in cmdline:
                try:
                    environ = Path(f"/proc/{entry}/environ").read_bytes()
                except OSError:
                    continue
                if str(self.conf).encode() in environ:
                    os.kill(int(entry), signal.SIGKILL)


def for_the_session(tmp_path_factory, kind=None, **options):
    """A session fixture's body: the cluster started (skipped where none can run, but never in
    CI), and once the session ends, stopped, with the last jobs' processes gone."""
    import pytest

    kind = kind or SlurmCluster
    problem = missing(options.get("accounting", False)) or (kind.missing_more() if hasattr(kind, "missing_more") else None)
    if problem:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no Slurm cluster can run here: {problem}")
        pytest.skip(problem)
    cluster = kind(**options)
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    yield cluster
    cluster.close()
    wait_for_no_process_of(tmp_path_factory.getbasetemp())


def following(cluster, monkeypatch, keep=frozenset()):
    """A test fixture's body: the test's jobs go to `cluster`, read afresh, and the jobs it leaves
    in the queue are cancelled after it (but those in `keep`, which outlive it on purpose)."""
    from jupyter_trainer.backends.slurm.queue import QUEUE

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    QUEUE.reset()
    yield cluster
    left = [job_id for job_id in cluster.run("squeue", "--me", "-h", "-o", "%i").stdout.split() if job_id not in keep]
    if left:
        cluster.run("scancel", *left)


def submit(script, workdir, name, **options):
    """A cell (dedented) submitted with --slurm and `options`, as job `name`."""
    import textwrap

    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.submit import submit_detached

    spec = build_spec(textwrap.dedent(script), workdir=str(workdir), slurm=True, **options)
    return submit_detached(spec, name=name).job


def wait_for_no_process_of(marker, timeout=15.0):
    """A stopped job's supervisor leaves its grace timer's `sleep` to end on its own, a few seconds
    (Slurm's KillWait): let the last ones end before the session counts leftovers."""
    marker = str(marker).encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = False
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_bytes():
                    left = True
                    break
            except OSError:
                continue
        if not left:
            return
        time.sleep(0.5)
    import sys

    print(f"\nstill running after {timeout:g} s: pid {entry}: {Path(f'/proc/{entry}/cmdline').read_bytes()[:200]!r}", file=sys.stderr)
