"""A Docker engine of the tests' own, for tests that stop, restart or reconfigure an engine.

A test must never stop or restart the engine of the machine it runs on: it may be a user's, with
their containers in it. A PrivateEngine is a dockerd with its own containerd, sockets, data, state
and pid files, all under one temporary directory, and its own network namespace, where its docker0
bridge lives, so nothing it does reaches the machine's engine or network. Its containers start on
the default bridge network as usual, with no way out of that namespace (no iptables rules): jobs on
a local image need none.

    engine = PrivateEngine()
    engine.start()                      # or start("--live-restore"): extra dockerd arguments
    engine.load_image(docker.from_env(), "some-image:tag")
    ... DOCKER_HOST=engine.url ...
    engine.restart("--live-restore")
    engine.close()                      # removes its containers, stops it, deletes its directory

Running one needs root, `dockerd` and `containerd`, and util-linux's `unshare` and `nsenter`
(`missing()` says what lacks).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0  # dockerd gives each container 10 s to stop on TERM before it kills it

# Our own containerd rather than the one dockerd would pick: a dockerd finding the system's
# containerd (/run/containerd/containerd.sock) would share it, and the machine's containers with it.
# CRI is Kubernetes' interface, which nothing here needs.
CONTAINERD_CONFIG = """\
version = 2
root = "{root}/containerd/root"
state = "{root}/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{root}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/containerd/opt"
"""


def missing() -> str | None:
    """Why no private engine can run here, or None."""
    for binary, package in (("dockerd", "docker.io"), ("containerd", "containerd"), ("unshare", "util-linux"), ("nsenter", "util-linux")):
        if shutil.which(binary) is None:
            return f"no `{binary}` on PATH (Debian package {package})"
    if os.geteuid() != 0:
        return "dockerd needs root"
    return None


class PrivateEngine:
    def __init__(self):
        # under /tmp rather than pytest's deeper tmp_path: unix socket paths are limited to 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="jt-engine-"))
        self.socket = self.root / "docker.sock"
        self.netns = self.root / "netns"
        self.url = f"unix://{self.socket}"
        self.args: tuple[str, ...] = ()  # the extra dockerd arguments it runs with
        self._containerd: subprocess.Popen | None = None
        self._dockerd: subprocess.Popen | None = None
        self._client = None

    def __repr__(self):
        return f"<PrivateEngine {self.url} {'running' if self.running else 'stopped'}>"

    # -- the engine --------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._dockerd is not None and self._dockerd.poll() is None

    def start(self, *dockerd_args: str) -> None:
        if self.running:
            raise RuntimeError("the private engine is running already")
        if not self.netns.exists():
            self._make_netns()
        if self._containerd is None or self._containerd.poll() is not None:
            self._start_containerd()
        config = self.root / "daemon.json"
        config.write_text("{}\n")  # not the machine's /etc/docker/daemon.json
        self._dockerd = self._spawn(
            "dockerd",
            [
                "dockerd",
                "--host", self.url,
                "--containerd", str(self.root / "containerd.sock"),
                "--config-file", str(config),
                "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"),
                "--pidfile", str(self.root / "dockerd.pid"),
                # no NAT rules: its containers need no way out of the namespace, and the machine's
                # iptables setup (legacy or nft, the lock the machine's engine takes) stays out of it
                "--iptables=false", "--ip6tables=false",
                *dockerd_args,
            ],
        )  # fmt: skip
        self.args = dockerd_args
        self._wait(self._dockerd, "dockerd", self._answers)

    def stop(self) -> None:
        """Stop dockerd as a service manager would (TERM, then KILL after STOP_TIMEOUT); containerd stays up."""
        if self._dockerd is not None:
            _terminate(self._dockerd, STOP_TIMEOUT)
            self._dockerd = None

    def restart(self, *dockerd_args: str) -> None:
        self.stop()
        self.start(*dockerd_args)

    @property
    def client(self):
        """A docker-py client of this engine; it reconnects by itself across restarts."""
        if self._client is None:
            import docker

            self._client = docker.DockerClient(base_url=self.url, version="auto", timeout=120)
        return self._client

    def load_image(self, source, name: str) -> None:
        """Copy image `name` from the engine of docker-py client `source`, streamed like `docker save | docker load`."""
        self.client.images.load(source.images.get(name).save(named=name))
        self.client.images.get(name)  # loaded under its name, or this raises

    def remove_containers(self) -> None:
        for container in self.client.containers.list(all=True):
            container.remove(force=True)

    def close(self) -> None:
        """Remove every container, stop dockerd and containerd, and delete the directory."""
        try:
            try:
                if not self.running and any((self.root / "data" / "containers").glob("*")):
                    self.start()  # only a running engine removes its containers cleanly
                if self.running:
                    self.remove_containers()
            finally:
                self.stop()
                if self._client is not None:
                    self._client.close()
                    self._client = None
                if self._containerd is not None:
                    _terminate(self._containerd, STOP_TIMEOUT)
                    self._containerd = None
        finally:
            self._kill_strays()
            self._unmount()
            shutil.rmtree(self.root, ignore_errors=True)

    def log(self, name: str = "dockerd", lines: int = 30) -> str:
        """The end of dockerd's (or containerd's) output."""
        try:
            return "".join((self.root / f"{name}.log").read_text(errors="replace").splitlines(True)[-lines:])
        except OSError:
            return ""

    # -- inner workings ----------------------------------------------------

    def _make_netns(self) -> None:
        """A network namespace that lasts until close(), bound to a file: the engine's docker0 and its containers'
        interfaces live there, across restarts (a live-restored container keeps its link to the bridge).

        Not --bridge=none in the machine's namespace instead: a dockerd started so deletes the machine's
        docker0, which the machine's engine needs."""
        self.netns.touch()
        subprocess.run(["unshare", f"--net={self.netns}", "true"], check=True, capture_output=True)

    def _start_containerd(self) -> None:
        config = self.root / "containerd.toml"
        config.write_text(CONTAINERD_CONFIG.format(root=self.root))
        socket = self.root / "containerd.sock"
        self._containerd = self._spawn("containerd", ["containerd", "--config", str(config)])
        self._wait(self._containerd, "containerd", socket.is_socket)

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        # nsenter execs the command in the namespace: the process is the engine itself, to signal and wait for
        command = ["nsenter", f"--net={self.netns}", *command]
        with open(self.root / f"{name}.log", "ab") as log:
            # its own session: a ^C meant for pytest must not stop it before the cleanup does
            return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _answers(self) -> bool:
        import docker

        try:
            return self.client.ping()
        except (docker.errors.DockerException, OSError):  # requests' connection errors are OSErrors
            return False

    def _wait(self, process: subprocess.Popen, name: str, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} on start:\n{self.log(name)}")
            if time.monotonic() > deadline:
                _terminate(process, 10)
                raise RuntimeError(f"{name} did not answer within {START_TIMEOUT:.0f}s:\n{self.log(name)}")
            time.sleep(0.1)

    def _kill_strays(self) -> None:
        """Kill what outlived a failed cleanup: shims of our containerd. Only processes whose command line names
        our directory, which is unique to this engine."""
        marker = str(self.root).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker in handle.read():
                        os.kill(int(entry), signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass

    def _unmount(self) -> None:
        """Unbind the network namespace, which ends it, and undo the mounts dockerd leaves when it dies uncleanly
        (its storage, containers' shm and network namespaces)."""
        prefix = str(self.root)
        mounts = []
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                point = line.split()[4].encode().decode("unicode_escape")  # mountinfo escapes spaces as \040
                if point == prefix or point.startswith(prefix + "/"):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)


def _terminate(process: subprocess.Popen, timeout: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
