"""A "remote host" for the tests: a second Docker engine reached over real SSH, as a laptop reaches a GPU server.

A RemoteHost is a container (named jt-remote-<random>) on the machine's engine, of the image
.ci/build-remote-host-image builds, that runs its own dockerd (the nested engine, with its data on a
docker volume of its own) and an sshd published on 127.0.0.1 at a free port. Root logs in with a key
pair made for this host alone; its host keys are made when it starts and recorded in a known_hosts
file, so that clients connect with strict host key checking. Nothing of the machine's ~/.ssh (nor of
/etc/ssh) is read or written: every file lives in a temporary directory of the RemoteHost's own.

    with RemoteHost() as remote:            # start() ... close()
        remote.load_image("jupyter-trainer-test:bookworm-pip")
        client = remote.client()            # docker-py over ssh:// (paramiko)
        client.containers.run(...)
        remote.stop_sshd()                  # the laptop goes offline (connections reset at once);
        remote.start_sshd()                 # the nested engine runs on; a new client connects again
        remote.block_ssh()                  # or the network drops packets silently (calls time out)
        remote.unblock_ssh()
        remote.exec("docker ps")            # a command in the remote host (not over SSH)

What a client needs, each kind its own way:

- docker-py with paramiko (the default, `docker.DockerClient(base_url=remote.url)`; the `docker[ssh]`
  extra, i.e. paramiko): reads `~/.ssh/config` and `~/.ssh/known_hosts` through expanduser, i.e. from
  $HOME, when the client is made (afterwards it keeps the key and host keys it loaded).
  `remote.client()` makes one with HOME pointing at `remote.home` for that moment. Anything else that
  makes its own client (`docker.from_env()` with DOCKER_HOST=remote.url or remote.alias_url) needs
  HOME=remote.home while it does: `remote.environ()` says so. docker-py only honours the config's
  HostName, User, IdentityFile and ProxyCommand, not Port (it makes ssh://HOST ssh://HOST:22): the URL
  carries the port, hence alias_url is ssh://jt-remote-test:PORT.
- docker-py with `use_ssh_client=True`, and the docker CLI: run the `ssh` program at each connection,
  which reads `~/.ssh/config` of the passwd entry's home, never $HOME. `remote.bin_dir` holds an `ssh`
  that runs the real one with `-F remote.ssh_config_path`; it must come first on PATH while such a
  client is used: `remote.environ()` says so too (e.g. for monkeypatch.setenv or a subprocess's env).
- the ssh program itself: `ssh -F remote.ssh_config_path jt-remote-test ...`.

Both docker-py modes run `docker system dial-stdio` on the remote host (docker-py 7 opens an exec channel
for each connection, not a direct-streamlocal one); sshd allows stream-local and TCP forwarding as well,
for `ssh -L local.sock:/var/run/docker.sock`.

Running one needs a Docker engine that can start a container with every capability but SYS_RESOURCE
(no --privileged), and the image (`bash .ci/build-remote-host-image`); `missing()` says what lacks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

IMAGE = os.environ.get("JUPYTER_TRAINER_REMOTE_HOST_IMAGE", "jupyter-trainer-remote-host:bookworm")
ALIAS = "jt-remote-test"  # the Host alias in ssh_config_path
START_TIMEOUT = 90.0
DOCKERD_LOG = "/var/log/jt-remote-dockerd.log"
SSHD_LOG = "/var/log/jt-remote-sshd.log"
LABEL = "jt-remote"  # on the container and the volume a RemoteHost makes

# dockerd needs the cgroup hierarchies writable; a private cgroup namespace's are mounted read-only. Every
# mount of type cgroup or cgroup2 (name=systemd's too: runc writes there), the type being the field after
# mountinfo's "-" (optional fields before it, e.g. shared:N, shift the columns)
REMOUNT_CGROUPS = r"""
for point in $(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { type = $(i + 1); break } }
        $5 ~ "^/sys/fs/cgroup" && type ~ "^cgroup" { print $5 }' /proc/self/mountinfo); do
    mount -o remount,bind,rw "$point" || exit 1
done
"""

_SSH_RULES = ("INPUT -p tcp --dport 22 -j DROP", "OUTPUT -p tcp --sport 22 -j DROP")

_HOME_LOCK = threading.Lock()  # HOME is process-wide


@dataclass
class ExecResult:
    exit_code: int
    output: str  # stdout and stderr


def missing(local=None) -> str | None:
    """Why no RemoteHost can run here, or None."""
    try:
        import docker

        local = local or docker.from_env()
        local.ping()
    except Exception as exc:  # noqa: BLE001  any failure means: no engine to run it on
        return f"no Docker engine reachable ({exc.__class__.__name__})"
    try:
        local.images.get(IMAGE)
    except docker.errors.DockerException:
        return f"remote host image {IMAGE} missing (bash .ci/build-remote-host-image builds it)"
    try:
        import paramiko  # noqa: F401  docker-py's ssh:// transport
    except ImportError:
        return "paramiko is not installed (pip install 'docker[ssh]')"
    return None


class RemoteHost:
    def __init__(self, image: str = IMAGE, local=None, alias: str = ALIAS):
        """`local`: a docker-py client of the engine to run the remote host on (docker.from_env() by default)."""
        self.image = image
        self.alias = alias
        self.name = f"jt-remote-{secrets.token_hex(4)}"
        self.volume_name = f"{self.name}-docker"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.key_path = self.dir / "id_ed25519"
        self.known_hosts_path = self.dir / "known_hosts"
        self.ssh_config_path = self.dir / "ssh_config"
        self.home = self.dir / "home"  # a HOME whose ~/.ssh has the config, key and known_hosts (for paramiko)
        self.bin_dir = self.dir / "bin"  # an `ssh` that reads ssh_config_path (for the ssh program's users)
        self.port: int | None = None
        self.tls_dir = self.dir / "tls"  # the client's certificate, key and the CA (DOCKER_CERT_PATH)
        self.tls_port: int | None = None  # the engine's TLS port (2376 inside), published on 127.0.0.1
        self._local = local
        self._own_local = local is None
        self._container = None
        self._volume = None
        self._clients: list = []
        self._closed = False

    def __repr__(self):
        return f"<RemoteHost {self.name} {self.url if self.port else '(not started)'}>"

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    # -- what clients use ---------------------------------------------------

    @property
    def url(self) -> str:
        """ssh://root@127.0.0.1:PORT (needs the key and known_hosts: see client() and environ())."""
        return f"ssh://root@127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        """tcp://127.0.0.1:PORT: the engine over TLS, with a client certificate (tls_dir)."""
        return f"tcp://127.0.0.1:{self.tls_port}"

    @property
    def alias_url(self) -> str:
        """ssh://jt-remote-test:PORT: the same host through the Host alias of the ssh config (HostName,
        User, key). With the port: docker-py makes ssh://HOST ssh://HOST:22, in both of its modes."""
        return f"ssh://{self.alias}:{self.port}"

    def environ(self, base: dict | None = None) -> dict[str, str]:
        """The variables under which a client of any kind reaches this host by url or alias_url: HOME for
        paramiko (docker-py's default), PATH starting with bin_dir for the ssh program (docker-py's
        use_ssh_client=True, the docker CLI). Only HOME and PATH, changed from `base` (os.environ)."""
        base = os.environ if base is None else base
        return {"HOME": str(self.home), "PATH": f"{self.bin_dir}{os.pathsep}{base.get('PATH', os.defpath)}"}

    def client(self, use_ssh_client: bool = False, timeout: int = 60):
        """A docker-py DockerClient of the nested engine over SSH (closed by close()).

        Paramiko (default): made with HOME=self.home for the moment it connects, so it finds the key and
        host keys here; it needs nothing afterwards. use_ssh_client=True: each connection runs `ssh`,
        which must be bin_dir's (put environ()["PATH"] in os.environ first); otherwise this raises."""
        import docker

        if use_ssh_client:
            wrapper = self.bin_dir / "ssh"
            if shutil.which("ssh") != str(wrapper):
                raise RuntimeError(
                    f"`ssh` on PATH is {shutil.which('ssh')}, not {wrapper}: the ssh program reads the passwd "
                    f"home's ~/.ssh/config, not this host's; set PATH={self.environ()['PATH']} first"
                )
            client = docker.DockerClient(base_url=self.url, use_ssh_client=True, timeout=timeout)
        else:
            with self._home():
                client = docker.DockerClient(base_url=self.url, timeout=timeout)
        self._clients.append(client)
        return client

    # -- the remote host ----------------------------------------------------

    def start(self) -> None:
        """Run the container, its dockerd and sshd; return once both answer."""
        if self._closed:
            raise RuntimeError("this RemoteHost is closed")
        if self._container is not None:
            raise RuntimeError("this RemoteHost is started already")
        import docker

        if self._local is None:
            self._local = docker.from_env()
        public_key = self._make_key()
        labels = {LABEL: self.name}
        self._volume = self._local.volumes.create(self.volume_name, labels=labels)
        self._container = self._local.containers.run(
            self.image,
            name=self.name,
            hostname="jt-remote-host",
            detach=True,
            init=True,  # a PID 1 that reaps orphans (sshd sessions, dockerd's children)
            labels=labels,
            # a nested dockerd without --privileged (which this kind of engine cannot start: runc cannot
            # apply CAP_SYS_RESOURCE): every other capability, no seccomp (runc's keyctl) nor AppArmor
            # profile, a cgroup namespace of its own (whose cgroup mounts start() makes writable), and
            # /var/lib/docker on a volume (overlay2 works there, not on the container's overlay root)
            cap_add=["ALL"],
            cap_drop=["SYS_RESOURCE"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            cgroupns="private",
            volumes={self.volume_name: {"bind": "/var/lib/docker", "mode": "rw"}},
            ports={"22/tcp": ("127.0.0.1", None), "2376/tcp": ("127.0.0.1", None)},  # free ports, chosen by the engine
            cpu_shares=512,  # half the weight of other containers when the CPUs are contended
        )
        self.exec(REMOUNT_CGROUPS, check=True)
        self.exec(
            "ssh-keygen -A >/dev/null && mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh && "
            'printf "%s\\n" "$KEY" >/root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys',
            environment={"KEY": public_key},
            check=True,
        )
        self._make_tls()
        self._start_dockerd()
        self.port = self._published_port()
        self.tls_port = self._published_port("2376/tcp")
        self._write_client_files()
        self.start_sshd()

    def start_sshd(self) -> None:
        """Start sshd unless it runs (the laptop is online again); return once it answers on the published port."""
        # it forks to the background itself, and writes /run/sshd.pid
        self.exec(f'kill -0 "$(cat /run/sshd.pid 2>/dev/null)" 2>/dev/null || /usr/sbin/sshd -E {SSHD_LOG}', check=True)
        self._wait(self._sshd_answers, "sshd", SSHD_LOG)

    def stop_sshd(self, sessions: bool = True) -> None:
        """Stop sshd (the laptop goes offline): the listener and, unless sessions=False, every open session,
        so that open connections end too. The nested engine and its containers run on."""
        if sessions:
            script = "pkill -x sshd; for _ in $(seq 100); do pgrep -x sshd >/dev/null || exit 0; sleep 0.1; done; exit 1"
        else:
            script = 'kill "$(cat /run/sshd.pid)" && rm -f /run/sshd.pid'
        self.exec(script, check=True)

    def block_ssh(self) -> None:
        """The laptop's network drops every packet silently (no reset, unlike stop_sshd): the remote host
        drops what comes to or leaves from port 22. Open connections hang until a timeout ends them."""
        for rule in _SSH_RULES:
            self.exec(f"iptables -C {rule} 2>/dev/null || iptables -I {rule}", check=True)

    def unblock_ssh(self) -> None:
        """The network is back: undo block_ssh(), if it was (open connections that did not time out carry on)."""
        for rule in _SSH_RULES:
            self.exec(f"while iptables -C {rule} 2>/dev/null; do iptables -D {rule} || exit 1; done", check=True)

    def exec(self, cmd, check: bool = False, environment: dict | None = None) -> ExecResult:
        """Run a command (a shell script if a string, else an argument list) as root in the remote host
        container, directly (not over SSH). check=True: raise unless it exits with 0."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        exit_code, output = self._container.exec_run(argv, environment=environment)
        result = ExecResult(exit_code, output.decode("utf-8", "replace"))
        if check and exit_code != 0:
            raise RuntimeError(f"{argv!r} exited with {exit_code} in {self.name}:\n{result.output}")
        return result

    def load_image(self, name: str, via_ssh: bool = False) -> None:
        """Copy image `name` from the machine's engine into the nested one, streamed like
        `docker save NAME | docker load`: into `docker load` in the container (the docker CLI's
        `docker exec -i`), or with via_ssh=True (or without a docker CLI here) over SSH with a docker-py
        client (slower: paramiko's encryption in Python)."""
        if via_ssh or shutil.which("docker") is None:
            client = self.client(timeout=600)
            client.images.load(self._local.images.get(name).save(named=name))
        else:
            save = subprocess.Popen(["docker", "save", name], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            try:
                load = subprocess.run(
                    ["docker", "exec", "-i", self.name, "docker", "load", "-q"],
                    stdin=save.stdout,
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=False,
                )
            finally:
                save.stdout.close()
                save.wait()
            if save.returncode or load.returncode:
                raise RuntimeError(f"copying {name} failed: {load.stdout}{load.stderr}")
        self.exec(["docker", "image", "inspect", name], check=True)  # loaded under its name, or this raises

    def log(self, which: str = "dockerd", lines: int = 30) -> str:
        """The end of the nested dockerd's (or sshd's) output."""
        path = DOCKERD_LOG if which == "dockerd" else SSHD_LOG
        if self._container is None:
            return ""
        try:
            return self.exec(["tail", "-n", str(lines), path]).output
        except Exception:  # noqa: BLE001  a log is for a message about another failure
            return ""

    def close(self) -> None:
        """Remove what this made: its clients, the container (and with it the nested engine and its
        containers), its volume, its directory. Idempotent."""
        self._closed = True
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        try:
            if self._local is not None:
                import docker

                for remove in (self._remove_container, self._remove_volume):
                    try:
                        remove()
                    except docker.errors.NotFound:
                        pass
        finally:
            self._container = None
            self._volume = None
            shutil.rmtree(self.dir, ignore_errors=True)
            if self._own_local and self._local is not None:
                with contextlib.suppress(Exception):
                    self._local.close()
                self._local = None

    # -- inner workings -----------------------------------------------------

    def _remove_container(self):
        self._local.containers.get(self.name).remove(force=True)

    def _remove_volume(self):
        self._local.volumes.get(self.volume_name).remove(force=True)

    def _make_key(self) -> str:
        """An ed25519 key pair in OpenSSH's format (what ssh-keygen writes), made with cryptography
        (paramiko's own dependency): no ssh-keygen needed here. Returns the public key's line."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(private)
        line = f"{public.decode()} {self.name}"
        Path(f"{self.key_path}.pub").write_text(line + "\n")
        return line

    def _start_dockerd(self) -> None:
        # detached (docker exec -d): stdin from /dev/null, output to a file, in the container's session;
        # besides its socket, on tcp://:2376 with TLS, clients verified by the test's CA (see _make_tls)
        listen = (
            "-H unix:///var/run/docker.sock -H tcp://0.0.0.0:2376 --tlsverify "
            "--tlscacert /etc/jt-tls/ca.pem --tlscert /etc/jt-tls/server.pem --tlskey /etc/jt-tls/server-key.pem"
        )
        self._container.exec_run(["sh", "-c", f"exec dockerd {listen} >>{DOCKERD_LOG} 2>&1 </dev/null"], detach=True)
        self._wait(lambda: self.exec("docker version >/dev/null 2>&1").exit_code == 0, "dockerd", DOCKERD_LOG)

    def _published_port(self, port: str = "22/tcp") -> int:
        self._container.reload()
        bindings = self._container.attrs["NetworkSettings"]["Ports"][port]
        return int(bindings[0]["HostPort"])

    def _make_tls(self) -> None:
        """A CA of this host's own, the engine's certificate (for 127.0.0.1) and a client's: the client's
        in tls_dir (ca.pem, cert.pem, key.pem: what DOCKER_CERT_PATH names), the engine's copied in."""
        import datetime
        import io
        import ipaddress
        import tarfile

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.timezone.utc)

        def certificate(name, key, issuer_name, issuer_key, ca=False, usage=None, addresses=()):
            builder = (
                x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            )  # fmt: skip
            if usage is not None:
                builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            if addresses:
                builder = builder.add_extension(x509.SubjectAlternativeName(list(addresses)), critical=False)
            return builder.sign(issuer_key, hashes.SHA256())

        def pem(item) -> bytes:
            if hasattr(item, "private_bytes"):
                return item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            return item.public_bytes(serialization.Encoding.PEM)

        ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{self.name} CA")])
        ca = certificate(f"{self.name} CA", ca_key, ca_name, ca_key, ca=True)
        server = certificate(
            "127.0.0.1", server_key, ca_name, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH,
            addresses=(x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")),
        )  # fmt: skip
        client = certificate("client", client_key, ca_name, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
        self.tls_dir.mkdir(mode=0o700)
        for name, item in (("ca.pem", ca), ("cert.pem", client), ("key.pem", client_key)):
            (self.tls_dir / name).write_bytes(pem(item))
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            folder = tarfile.TarInfo("etc/jt-tls")
            folder.type, folder.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(folder)
            for name, item in (("ca.pem", ca), ("server.pem", server), ("server-key.pem", server_key)):
                data = pem(item)
                info = tarfile.TarInfo(f"etc/jt-tls/{name}")
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
        self._container.put_archive("/", archive.getvalue())

    def _write_client_files(self) -> None:
        """known_hosts with the host keys the container made, the ssh config, the HOME for paramiko and the
        `ssh` wrapper."""
        keys = self.exec("cat /etc/ssh/ssh_host_*_key.pub", check=True).output.split("\n")
        # ssh and paramiko look a host on another port than 22 up as [host]:port
        lines = [f"[127.0.0.1]:{self.port} {' '.join(key.split()[:2])}" for key in keys if key.strip()]
        self.known_hosts_path.write_text("\n".join(lines) + "\n")
        config = (
            f"# the tests' remote host {self.name} (tests/remote_host.py)\n"
            f"Host {self.alias} 127.0.0.1\n"
            f"    HostName 127.0.0.1\n"
            f"    Port {self.port}\n"
            f"    User root\n"
            f"    IdentityFile {self.key_path}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts_path}\n"
            f"    GlobalKnownHostsFile /dev/null\n"
            f"    StrictHostKeyChecking yes\n"
            f"    BatchMode yes\n"
            f"    ConnectTimeout 10\n"
        )
        self.ssh_config_path.write_text(config)
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(parents=True, mode=0o700)
        (dot_ssh / "config").write_text(config)  # paramiko honours only HostName, Port, User, IdentityFile
        shutil.copy(self.known_hosts_path, dot_ssh / "known_hosts")  # paramiko ignores UserKnownHostsFile
        self.bin_dir.mkdir()
        real_ssh = shutil.which("ssh") or "/usr/bin/ssh"
        wrapper = self.bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {real_ssh} -F {self.ssh_config_path} "$@"\n')
        wrapper.chmod(0o755)

    def _sshd_answers(self) -> bool:
        """Whether an SSH server greets on the published port (docker's proxy accepts even when none listens)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                return sock.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def _wait(self, ready, what: str, log: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if time.monotonic() > deadline:
                tail = self.exec(["tail", "-n", "30", log]).output
                raise RuntimeError(f"{what} in {self.name} did not answer within {START_TIMEOUT:.0f}s:\n{tail}")
            time.sleep(0.2)

    @contextlib.contextmanager
    def _home(self):
        with _HOME_LOCK:
            old = os.environ.get("HOME")
            os.environ["HOME"] = str(self.home)
            try:
                yield
            finally:
                if old is None:
                    os.environ.pop("HOME", None)
                else:
                    os.environ["HOME"] = old
