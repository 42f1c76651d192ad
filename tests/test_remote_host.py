"""The tests' remote host (tests/remote_host.py): a second, nested Docker engine reached over real SSH.

These check the fixture itself: that docker-py reaches the nested engine over ssh:// with strict host
key checking and without the machine's ~/.ssh, that it is another engine, that jobs run there and keep
running while sshd is away, and how quickly a client fails meanwhile."""

import os
import subprocess
import time

import pytest
from conftest import TEST_IMAGE, wait_for
from remote_host import RemoteHost, missing

pytestmark = pytest.mark.docker

FAILS_WITHIN = 5.0  # seconds a call may take to fail once sshd is gone (measured: well under 0.1 s)


@pytest.fixture
def remote_client(remote):
    """A docker-py client of the remote engine; afterwards the remote host is online again, without containers."""
    yield remote.client(timeout=30)
    remote.unblock_ssh()
    remote.start_sshd()
    client = remote.client(timeout=30)  # a client whose connection sshd's stop ended stays broken
    for container in client.containers.list(all=True):
        container.remove(force=True)
    client.volumes.prune()


def test_the_nested_engine_is_another_engine_reached_over_ssh(remote, remote_client, docker_client):
    assert remote.url.startswith("ssh://root@127.0.0.1:")
    assert remote_client.api.base_url.startswith("http+docker://ssh")
    version = remote_client.version()
    assert version["Version"] and version["ApiVersion"]
    assert remote_client.info()["ID"] != docker_client.info()["ID"]
    assert remote_client.images.get(TEST_IMAGE).tags == [TEST_IMAGE]
    assert remote.exec("hostname").output.strip() == "jt-remote-host"


def test_a_host_key_other_than_the_recorded_one_is_refused(remote, tmp_path, monkeypatch):
    import docker
    import paramiko

    # no known host at all: paramiko's RejectPolicy, as with a HOME whose known_hosts lacks it
    empty_home = tmp_path / "empty-home"
    (empty_home / ".ssh").mkdir(parents=True)
    (empty_home / ".ssh" / "config").write_text((remote.home / ".ssh" / "config").read_text())
    monkeypatch.setenv("HOME", str(empty_home))
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        docker.DockerClient(base_url=remote.url)
    # another key for the host: refused too
    other = paramiko.Ed25519Key.from_private_key_file(str(remote.key_path))  # any ed25519 key but the host's
    (empty_home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{remote.port} ssh-ed25519 {other.get_base64()}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        docker.DockerClient(base_url=remote.url)


def test_the_ssh_program_and_the_docker_cli_reach_it_through_the_alias(remote, remote_client, monkeypatch):
    import docker

    engine_id = remote_client.info()["ID"]
    ssh = subprocess.run(
        ["ssh", "-F", str(remote.ssh_config_path), remote.alias, "docker info --format '{{.ID}}'"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert ssh.returncode == 0, ssh.stderr
    assert ssh.stdout.strip() == engine_id
    with pytest.raises(RuntimeError, match="not .*bin/ssh"):
        remote.client(use_ssh_client=True)  # the ssh on PATH reads the passwd home's config, not ours
    for name, value in remote.environ().items():
        monkeypatch.setenv(name, value)
    assert remote.client(use_ssh_client=True).info()["ID"] == engine_id
    monkeypatch.setenv("DOCKER_HOST", remote.alias_url)  # ssh://jt-remote-test:PORT
    from_env = docker.from_env()  # paramiko, reading the alias from $HOME/.ssh/config
    try:
        assert from_env.info()["ID"] == engine_id
    finally:
        from_env.close()
    cli = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True, text=True, timeout=60, check=False)
    assert cli.stdout.strip() == engine_id, cli.stderr


def test_a_job_runs_on_while_sshd_is_away(remote, remote_client):
    import docker
    import paramiko

    remote_client.volumes.create("jt-remote-data")
    job = remote_client.containers.run(
        TEST_IMAGE,
        ["sh", "-c", "echo written-remotely >/data/out.txt; sleep 600"],
        name="jt-remote-job",
        volumes={"jt-remote-data": {"bind": "/data", "mode": "rw"}},
        detach=True,
    )
    in_volume = "cat /var/lib/docker/volumes/jt-remote-data/_data/out.txt"
    wait_for(lambda: remote.exec(in_volume).output.strip() == "written-remotely", what="the job's file")
    job.reload()

    remote.stop_sshd()
    started = time.monotonic()
    # measured: requests' ConnectionError (OSError "Socket is closed") at once; paramiko's SSHException
    # ("SSH session not active") on each later call
    with pytest.raises((OSError, paramiko.SSHException)):
        remote_client.containers.get(job.id)
    assert time.monotonic() - started < FAILS_WITHIN
    started = time.monotonic()
    with pytest.raises(paramiko.SSHException, match="banner"):
        remote.client(timeout=30)  # no new connection either: docker's proxy takes it and closes it
    assert time.monotonic() - started < FAILS_WITHIN
    assert remote.exec("docker inspect -f '{{.State.Running}}' jt-remote-job").output.strip() == "true"

    remote.start_sshd()
    again = remote.client(timeout=30)  # the old paramiko client stays broken: docker-py keeps its dead transport
    assert again.containers.get(job.id).status == "running"
    assert again.containers.get(job.id).attrs["State"]["StartedAt"] == job.attrs["State"]["StartedAt"]
    assert remote.exec(in_volume).output.strip() == "written-remotely"
    with pytest.raises(docker.errors.NotFound):
        again.containers.get("jt-remote-no-such-container")  # an ordinary API error, over the new connection


def test_a_silent_network_makes_calls_time_out_and_heals(remote, remote_client):
    import requests

    client = remote.client(timeout=3)
    assert client.ping()
    remote.block_ssh()
    try:
        started = time.monotonic()
        with pytest.raises(requests.exceptions.ReadTimeout):
            client.ping()  # docker-py waits for its timeout, no longer
        assert 2.5 < time.monotonic() - started < 10
    finally:
        remote.unblock_ssh()
    assert remote.client(timeout=30).ping()
    assert remote_client.ping()  # an open connection that did not time out carries on


def test_close_removes_everything_it_made(docker_client):
    problem = missing(docker_client)
    if problem:
        pytest.skip(problem)  # the module's other tests say so, or fail in CI
    host = RemoteHost(local=docker_client)
    with host:
        assert host.client().ping()
        assert host.exec(["docker", "ps", "-q"]).output == ""
    host.close()  # again: nothing to do
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(host.name)
    with pytest.raises(docker.errors.NotFound):
        docker_client.volumes.get(host.volume_name)
    assert not os.path.exists(host.dir)
