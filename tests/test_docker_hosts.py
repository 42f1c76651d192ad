"""Which Docker engine a job uses: chosen as the docker CLI chooses (its contexts made by the real CLI)."""

import shutil
import subprocess

import pytest
from conftest import IN_CI

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.docker.hosts import LOCAL_SOCKET, Engine, resolve
from jupyter_trainer.errors import InvalidOption


def docker_cli(config_dir, *words):
    if shutil.which("docker") is None:
        if IN_CI:
            pytest.fail("the docker CLI must be installed in CI")
        pytest.skip("no docker CLI")
    subprocess.run(["docker", *words], env={"DOCKER_CONFIG": str(config_dir), "PATH": "/usr/bin:/bin"}, check=True, capture_output=True)


def test_the_order_of_the_docker_cli(tmp_path):
    config = tmp_path / "docker"
    docker_cli(config, "context", "create", "gpu2", "--docker", "host=ssh://me@gpu2.example:2222")
    named = {"gpu1": "ssh://me@gpu1.example"}
    env = {"DOCKER_CONFIG": str(config)}
    assert resolve(None, named, env) == Engine(LOCAL_SOCKET)  # no current context yet
    docker_cli(config, "context", "use", "gpu2")
    assert resolve(None, named, env) == Engine("ssh://me@gpu2.example:2222", name="gpu2")
    assert resolve(None, named, {**env, "DOCKER_CONTEXT": "default"}) == Engine(LOCAL_SOCKET)
    assert resolve(None, named, {**env, "DOCKER_HOST": "tcp://10.0.0.5:2375"}) == Engine("tcp://10.0.0.5:2375")  # DOCKER_HOST wins
    # a flag or its %config default wins over all: a URL, a docker_hosts name, a context's name
    assert resolve("gpu1", named, {**env, "DOCKER_HOST": "tcp://x:2375"}) == Engine("ssh://me@gpu1.example", name="gpu1")
    with pytest.raises(InvalidOption):  # a context of another config directory is not known here
        resolve("gpu2", named, {"DOCKER_CONFIG": str(tmp_path / "elsewhere")})
    assert resolve("gpu2", named, env).url == "ssh://me@gpu2.example:2222"
    assert resolve("unix:///run/other.sock", named, env) == Engine("unix:///run/other.sock")
    assert not resolve("unix:///run/other.sock", named, env).remote and resolve("gpu1", named, env).remote


def test_tls_as_the_docker_cli_takes_it(tmp_path):
    certs = tmp_path / "certs"
    assert resolve("tcp://gpu:2375", {}, {}).tls_dir is None  # the plain port, no TLS asked for
    on_tls_port = resolve("tcp://gpu:2376", {}, {"DOCKER_CERT_PATH": str(certs)})
    assert on_tls_port.tls_dir == str(certs) and on_tls_port.tls_verify
    verified = resolve(None, {}, {"DOCKER_HOST": "tcp://gpu:4243", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)})
    assert verified.tls_dir == str(certs) and verified.tls_verify


@pytest.mark.parametrize(
    "given, says",
    [
        ("gpu9", "neither an address nor a known host (docker_hosts: gpu1"),
        ("http://gpu1", "is not a Docker engine's address"),
        ("ssh://", "names no host"),
        ("ssh://me:secret@gpu1", "holds a password"),
        ("ssh://me@gpu1 ; rm -rf /", "is not a Docker engine's address"),
    ],
)
def test_a_bad_docker_host_is_one_line(given, says, tmp_path):
    with pytest.raises(InvalidOption) as error:
        resolve(given, {"gpu1": "ssh://me@gpu1"}, {"DOCKER_CONFIG": str(tmp_path)})
    assert says in str(error.value) and "\n" not in str(error.value)
    assert "secret" not in str(error.value)


def test_a_remote_workdir_is_the_hosts_and_sync_needs_a_remote_host(tmp_path, home, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    remote = build_spec("print(1)\n", image="img", docker_host="ssh://me@gpu1", workdir="/data/me/project", sync=str(tmp_path))
    assert remote.workdir == "/data/me/project" and remote.options.sync == str(tmp_path)
    assert remote.options.engine == {"url": "ssh://me@gpu1"} and remote.public_options()["engine"] == {"url": "ssh://me@gpu1"}
    assert build_spec("print(1)\n", image="img", docker_host="ssh://me@gpu1").workdir == ""  # a volume there
    with pytest.raises(InvalidOption, match="not an absolute directory of the remote host"):
        build_spec("print(1)\n", image="img", docker_host="ssh://me@gpu1", workdir="data/../etc")
    with pytest.raises(InvalidOption, match="--sync copies a directory to a remote Docker host"):
        build_spec("print(1)\n", image="img", workdir=str(tmp_path), sync=str(tmp_path))
    with pytest.raises(InvalidOption, match="--host"):
        build_spec("print(1)\n", host=True, workdir=str(tmp_path), docker_host="ssh://me@gpu1")
    # a cell that names no engine keeps its fingerprint (and its record) from before engines were chosen
    local = build_spec("print(1)\n", image="img", workdir=str(tmp_path))
    assert local.options.engine is None and "engine" not in local.public_options()


@pytest.mark.parametrize(
    "source, value",
    [("flag", "ssh://[::1"), ("flag", "tcp://[zz]:1"), ("flag", "ssh://gpu1:99999"), ("env", "ssh://[::1"), ("env", "fd://"), ("named", "ssh://[::1")],
)
def test_an_address_that_does_not_parse_is_one_line_naming_where_it_came_from(source, value, tmp_path):
    env = {"DOCKER_CONFIG": str(tmp_path)}
    with pytest.raises(InvalidOption) as error:
        if source == "flag":
            resolve(value, {}, env)
        elif source == "env":
            resolve(None, {}, {**env, "DOCKER_HOST": value})
        else:
            resolve("v6", {"v6": value}, env)
    said = str(error.value)
    assert "\n" not in said and {"flag": "--docker-host", "env": "DOCKER_HOST", "named": "docker_hosts['v6']"}[source] in said


def test_host_names_and_contexts_that_could_mislead_are_refused(tmp_path):
    escape = "gpu\x1b]0;pwned\x07"
    with pytest.raises(InvalidOption) as error:
        resolve(escape, {escape: "ssh://me@gpu1"}, {"DOCKER_CONFIG": str(tmp_path)})
    assert "\x1b" not in str(error.value)
    with pytest.raises(InvalidOption) as error:
        resolve("x" * 5000, {}, {"DOCKER_CONFIG": str(tmp_path)})
    assert len(str(error.value)) < 400
    # a context whose meta.json nests deeper than the parser goes is no context, not a traceback
    import hashlib

    meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"deep").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(InvalidOption):
        resolve("deep", {}, {"DOCKER_CONFIG": str(tmp_path)})


@pytest.mark.parametrize("workdir, kept", [("/.", None), ("//", None), ("/srv/./x/", "/srv/x"), ("//data", "/data")])
def test_a_remote_workdir_is_normalised_and_never_the_hosts_root(workdir, kept, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    if kept is None:
        with pytest.raises(InvalidOption, match="nor its root"):
            build_spec("print(1)\n", image="img", docker_host="ssh://me@gpu1", workdir=workdir)
    else:
        assert build_spec("print(1)\n", image="img", docker_host="ssh://me@gpu1", workdir=workdir).workdir == kept
