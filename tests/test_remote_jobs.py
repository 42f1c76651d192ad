"""Jobs on a remote Docker host, reached over real SSH: a second, real engine (tests/remote_host.py).

The laptop is this test process and the subprocesses it starts (a kernel, the CLI); the GPU server is
the RemoteHost, whose engine runs the job's container. The laptop's SSH setup is a HOME of the remote
host's own (~/.ssh/config with a Host alias, the key, known_hosts), as a user's would be.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TEST_IMAGE, wait_for

pytestmark = pytest.mark.docker

# prints 1..N, one line every `pause` seconds, then exits with `code`
COUNTER = textwrap.dedent(
    """
    import sys, time
    for i in range(1, {lines} + 1):
        print(f"line {{i}} of {lines}", flush=True)
        time.sleep({pause})
    sys.exit({code})
    """
)


def cli(*words, timeout=120):
    result = subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], capture_output=True, text=True, timeout=timeout)
    return result


def status(name):
    result = cli("status", name, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def submit_from_a_kernel(line, cell):
    """Run the cell magic in a fresh IPython that then dies (SIGKILL), as a closed laptop's kernel does."""
    code = textwrap.dedent(
        f"""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "jupyter_trainer")
        shell.run_cell_magic("train_detached", {line!r}, {cell!r})
        import os, signal, sys
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
    return result.stdout


def remote_containers(remote):
    return remote.client().containers.list(all=True, filters={"label": "jupyter_trainer=1"})


def test_a_remote_job_outlives_its_kernel_and_the_laptop_going_offline(laptop, home):
    remote = laptop
    lines = 30
    out = submit_from_a_kernel(
        f"--name far --docker-host {remote.alias_url} --image {TEST_IMAGE} --no-widget",
        COUNTER.format(lines=lines, pause=0.5, code=0),
    )
    assert "far: " in out, out
    wait_for(lambda: status("far")["status"] == "running", timeout=60, what="the job to run")
    facts = status("far")
    assert facts["host"] == "jt-remote-test" and "on jt-remote-test" in facts["where"]

    # nothing of the run is on the laptop for the remote side to read: its files are the remote
    # host's, on a volume there
    run_dir = home / "jobs" / "far" / "1"
    for name in ("script.py", "supervise.sh", "output.log"):
        (run_dir / name).unlink(missing_ok=True)
    (container,) = remote_containers(remote)
    assert {mount["Type"] for mount in container.attrs["Mounts"]} == {"volume"}

    follower = subprocess.Popen(
        [sys.executable, "-m", "jupyter_trainer", "logs", "far", "-f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: "line 3 of" in cli("logs", "far").stdout, timeout=60, what="the first lines")
        remote.stop_sshd()  # the laptop goes offline
        offline = status("far")
        assert offline["status"] == "running", offline
        assert offline["reason"].startswith("cannot reach jt-remote-test since "), offline
        listing = cli("list").stdout
        assert "jt-remote-test (unreachable since" in listing, listing
        time.sleep(lines * 0.5 + 2)  # the job ends while nobody can look
        assert remote.exec("docker ps -q").output.strip(), "the job's container runs on"
        again = status("far")
        assert again["status"] == "running" and again["reason"] == offline["reason"], again  # since the first failure
        remote.start_sshd()
        wait_for(lambda: status("far")["status"] == "completed", timeout=60, what="the job to be seen completed")
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    expected = [f"line {i} of {lines}" for i in range(1, lines + 1)]
    assert out.splitlines() == expected  # every line once, through the outage
    assert cli("logs", "far").stdout.splitlines() == expected
    final = status("far")
    assert final["exit_code"] == 0 and final["reason"] == ""


def test_a_job_that_ends_while_its_host_is_unreachable_shows_its_own_exit_code(laptop):
    remote = laptop
    submit_from_a_kernel(f"--name gone-dark --docker-host {remote.alias_url} --image {TEST_IMAGE} --no-widget", COUNTER.format(lines=6, pause=0.5, code=3))
    wait_for(lambda: status("gone-dark")["status"] == "running", timeout=60, what="the job to run")
    remote.block_ssh()  # packets dropped: calls time out rather than fail
    started = time.monotonic()
    blocked = status("gone-dark")
    assert time.monotonic() - started < 60, "a dropped connection is given up on in seconds"
    assert blocked["status"] == "running" and "cannot reach jt-remote-test since" in blocked["reason"], blocked
    time.sleep(5)
    remote.unblock_ssh()
    final = wait_for(lambda: (s := status("gone-dark"))["status"] != "running" and s, timeout=90, what="the job's end")
    assert final["status"] == "failed" and final["exit_code"] == 3, final


def test_sync_and_workdir_on_the_remote_host(laptop, tmp_path):
    remote = laptop
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "numbers.txt").write_text("1 2 3 4\n")
    script = "total = sum(map(int, open('data/numbers.txt').read().split()))\nopen('result.txt', 'w').write(str(total))\nprint('total', total)\n"
    submit_from_a_kernel(
        f"--name synced --docker-host {remote.alias_url} --image {TEST_IMAGE} --workdir /srv/project --sync {project} --no-widget",
        script,
    )
    final = wait_for(lambda: (s := status("synced"))["status"] not in ("pending", "running") and s, timeout=90, what="the job's end")
    assert final["status"] == "completed", final
    assert "total 10" in cli("logs", "synced").stdout
    # the files are the remote host's: synced up there, and the job's output written there
    assert remote.exec("cat /srv/project/result.txt").output == "10"
    assert remote.exec("cat /srv/project/data/numbers.txt").output == "1 2 3 4\n"
    assert not (project / "result.txt").exists()


def test_named_hosts_stop_and_freeing_the_remote_gpus(laptop, tmp_path):
    remote = laptop
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text(f"c.TrainerMagics.docker_hosts = {{'gpu1': {remote.alias_url!r}}}\n")
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}
    script = tmp_path / "train.py"
    script.write_text("import time\nprint('training', flush=True)\ntime.sleep(600)\n")

    def run(*words):
        return subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], capture_output=True, text=True, timeout=120, env=env)

    submitted = run("submit", str(script), "--name", "named", "--docker-host", "gpu1", "--image", TEST_IMAGE, "--stop-container-when-done")
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: "training" in run("logs", "named").stdout, timeout=60, what="the job to print")
    facts = json.loads(run("status", "named", "--json").stdout)
    assert facts["host"] == "gpu1" and facts["options"]["engine"] == {"url": remote.alias_url, "name": "gpu1"}
    assert "gpu1" in run("list").stdout
    stopped = run("stop", "named")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
    # --stop-container-when-done: the remote container (and its GPUs) is let go
    wait_for(lambda: all(c.status == "exited" for c in remote_containers(remote)), timeout=60, what="the remote container to stop")

    unknown = run("submit", str(script), "--docker-host", "gpu2", "--image", TEST_IMAGE)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "gpu1" in unknown.stderr, unknown.stderr


def test_a_reader_with_another_docker_host_follows_each_job_on_its_own_engine(laptop, docker_image, workdir):
    """A job on this machine's engine is not asked about on the reader's DOCKER_HOST (a remote host,
    where its container is not): it stays running, and stop reaches it."""
    remote = laptop
    submitted = cli("submit", str(_script(workdir, "import time\nprint('local', flush=True)\ntime.sleep(600)\n")), "--name", "here", "--image", docker_image, "--workdir", str(workdir))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: status("here")["status"] == "running", timeout=60, what="the local job to run")
    elsewhere = {**os.environ, "DOCKER_HOST": remote.alias_url}
    seen = json.loads(subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "here", "--json"], env=elsewhere, capture_output=True, text=True, timeout=60).stdout)
    assert seen["status"] == "running" and seen["host"] == "local", seen
    stopped = subprocess.run([sys.executable, "-m", "jupyter_trainer", "stop", "here"], env=elsewhere, capture_output=True, text=True, timeout=120)
    assert "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
    assert status("here")["status"] == "stopped"


def _script(directory, text):
    path = directory / f"job-{abs(hash(text))}.py"
    path.write_text(text)
    return path


def test_two_stores_of_the_same_path_never_share_a_run_on_the_host(laptop, tmp_path, monkeypatch):
    """Two laptops whose stores have the same path (/home/jovyan/.jupyter_trainer, say) submit the same
    job name to one host: each keeps its own log and exit code."""
    remote = laptop
    path = tmp_path / "jovyan" / ".jupyter_trainer"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(path))
    first = cli("submit", str(_script(tmp_path, "print('laptop A', flush=True)\n")), "--name", "train", "--docker-host", remote.alias_url, "--image", TEST_IMAGE)
    assert first.returncode == 0, first.stderr
    wait_for(lambda: status("train")["status"] == "completed", timeout=90, what="laptop A's job")
    path.rename(tmp_path / "laptop-a")
    second = cli("submit", str(_script(tmp_path, "print('laptop B', flush=True)\nraise SystemExit(7)\n")), "--name", "train", "--docker-host", remote.alias_url, "--image", TEST_IMAGE)
    assert second.returncode == 0, second.stderr
    wait_for(lambda: status("train")["status"] == "failed", timeout=90, what="laptop B's job")
    assert cli("logs", "train").stdout == "laptop B\n"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(tmp_path / "laptop-a"))
    assert cli("logs", "train").stdout == "laptop A\n" and status("train")["exit_code"] == 0


def test_sync_leaves_the_job_store_out_and_prune_clears_the_host(laptop, tmp_path, monkeypatch):
    remote = laptop
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.txt").write_text("data\n")
    # credentials as they lie in a home directory, and what the user's .trainerignore leaves out
    for secret in (".netrc", ".git-credentials", ".cache/huggingface/token", ".config/gh/hosts.yml", "sub/.pypirc"):
        (project / secret).parent.mkdir(parents=True, exist_ok=True)
        (project / secret).write_text("password hunter2\n")
    (project / "checkpoints").mkdir()
    (project / "checkpoints" / "last.pt").write_text("weights\n")
    (project / "data").mkdir()
    for name in ("big.bin", "keep.txt"):
        (project / "data" / name).write_text(name)
    (project / ".trainerignore").write_text("# not worth copying\ncheckpoints\ndata/**\n!data/keep.txt\n")
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(project / ".jupyter_trainer"))  # a notebook in ~, the store in it
    script = _script(tmp_path, "import os\nprint(sorted(os.path.join(d, f) for d, _, fs in os.walk('.') for f in fs), flush=True)\n")
    done = cli("submit", str(script), "--name", "synced", "--docker-host", remote.alias_url, "--image", TEST_IMAGE, "--sync", str(project))
    assert done.returncode == 0, done.stderr
    assert "--sync left out credentials: .cache/huggingface/token, .config/gh, .git-credentials, .netrc, sub/.pypirc" in done.stdout
    wait_for(lambda: status("synced")["status"] == "completed", timeout=90, what="the job")
    # not the store (its scripts, logs and key), no credential, nothing the ignore file lists
    assert cli("logs", "synced").stdout == "['./.trainerignore', './data/keep.txt', './train.txt']\n"
    assert "--sync left out credentials: .cache/huggingface/token" in cli("status", "synced").stdout
    # prune: the stopped container on the host and its runs' volume go (its workspace stays: the user's work)
    (container,) = remote_containers(remote)
    container.stop(timeout=1)
    assert cli("rm", "synced").returncode == 0
    pruned = cli("prune", "--older-than", "0s", "--containers")
    assert pruned.returncode == 0 and f"{container.name} on jt-remote-test" in pruned.stdout, pruned.stdout + pruned.stderr
    volumes = {volume.name for volume in remote.client().volumes.list()}
    assert f"{container.name}-runs" not in volumes and f"{container.name}-workspace" in volumes


def test_an_unreachable_host_is_one_line_without_ssh_tracebacks(laptop):
    remote = laptop
    remote.stop_sshd()
    result = cli("submit", str(_script(Path.cwd(), "print(1)\n")), "--docker-host", remote.alias_url, "--image", TEST_IMAGE)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot reach the Docker engine on jt-remote-test" in result.stderr
    assert cli("list").stdout.strip() == "No jobs yet."  # the store is as it was


def test_tcp_with_tls_from_the_environment_and_from_a_docker_context(laptop, tmp_path, monkeypatch):
    """The remote engine also listens on TLS with client certificates (tests/remote_host.py): reached as
    the docker CLI would, by DOCKER_HOST with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH, and by a context."""
    remote = laptop
    script = _script(tmp_path, "print('over TLS', flush=True)\n")
    monkeypatch.setenv("DOCKER_HOST", remote.tls_url)
    refused = cli("submit", str(script), "--name", "plain", "--image", TEST_IMAGE)  # plain HTTP to a TLS port
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr, refused.stderr
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(remote.tls_dir))
    assert cli("submit", str(script), "--name", "tls-env", "--image", TEST_IMAGE).returncode == 0
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name)
    config = tmp_path / "docker-config"
    tls = remote.tls_dir
    made = subprocess.run(
        ["docker", "context", "create", "tlsctx", "--docker", f"host={remote.tls_url},ca={tls}/ca.pem,cert={tls}/cert.pem,key={tls}/key.pem"],
        env={**os.environ, "DOCKER_CONFIG": str(config)}, capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    assert cli("submit", str(script), "--name", "tls-context", "--docker-host", "tlsctx", "--image", TEST_IMAGE).returncode == 0
    monkeypatch.delenv("DOCKER_CONFIG")  # the record names the engine and its TLS material: no config needed to follow
    for name in ("tls-env", "tls-context"):
        final = wait_for(lambda: (s := status(name))["status"] not in ("pending", "running") and s, timeout=90, what=f"{name} to end")
        assert final["status"] == "completed" and cli("logs", name).stdout == "over TLS\n", final
    assert status("tls-context")["host"] == "tlsctx" and status("tls-env")["host"] == "127.0.0.1"


def test_ssh_through_the_users_config_and_agent(laptop, tmp_path, monkeypatch):
    """ssh://ALIAS with no port and no key named: the Host entry of ~/.ssh/config gives HostName, Port
    and User, the key comes from a running ssh-agent (as a user's would), known_hosts is checked."""
    remote = laptop
    home = tmp_path / "user-home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(f"Host gpu-box\n    HostName 127.0.0.1\n    Port {remote.port}\n    User root\n")
    (home / ".ssh" / "known_hosts").write_text((remote.home / ".ssh" / "known_hosts").read_text())
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    values = dict(part.split("=", 1) for part in agent.replace(";", "\n").split() if "=" in part)
    monkeypatch.setenv("SSH_AUTH_SOCK", values["SSH_AUTH_SOCK"])
    try:
        subprocess.run(["ssh-add", str(remote.key_path)], check=True, capture_output=True)
        monkeypatch.setenv("HOME", str(home))
        script = _script(tmp_path, "print('via the agent', flush=True)\n")
        done = cli("submit", str(script), "--name", "agent", "--docker-host", "ssh://gpu-box", "--image", TEST_IMAGE)
        assert done.returncode == 0, done.stderr
        final = wait_for(lambda: (s := status("agent"))["status"] not in ("pending", "running") and s, timeout=90, what="the job")
        assert final["status"] == "completed" and cli("logs", "agent").stdout == "via the agent\n"
        assert final["host"] == "gpu-box"
    finally:
        subprocess.run(["kill", values["SSH_AGENT_PID"]], capture_output=True)


def _processes(remote, container_id):
    """The command lines running in a container on the remote host (read through its own engine)."""
    listing = remote.exec(["docker", "exec", container_id, "sh", "-c", 'for p in /proc/[0-9]*; do tr "\\000" " " < "$p/cmdline"; echo; done'])
    return [line for line in listing.output.splitlines() if line.strip()]


def test_a_followed_log_leaves_no_follower_behind(laptop, tmp_path):
    remote = laptop
    script = _script(tmp_path, "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n")
    assert cli("submit", str(script), "--name", "watched", "--docker-host", remote.alias_url, "--image", TEST_IMAGE).returncode == 0
    wait_for(lambda: "tick 2" in cli("logs", "watched", "-n", "3").stdout, timeout=60, what="the job to print")
    follower = subprocess.Popen([sys.executable, "-m", "jupyter_trainer", "logs", "watched", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    follower.kill()
    follower.wait()
    (container,) = remote_containers(remote)
    # the followers of the one-shot reads and of the killed `logs -f` end with their connections
    wait_for(lambda: not any("tail -c" in line for line in _processes(remote, container.id)), timeout=30, what="no follower left")
    assert cli("stop", "watched").returncode == 0


TRUNCATING = """
import os, sys, time
for i in range(2000):
    print(f"A {i}", flush=True)
while not os.path.exists("/workspace/go"):
    time.sleep(0.1)
os.ftruncate(1, 0)  # the job cuts its own log, then writes past its old size
for i in range(5000):
    print(f"L {i}", flush=True)
time.sleep(600)
"""


def test_a_log_cut_and_written_again_while_the_host_is_unreachable_is_read_from_its_new_start(laptop, tmp_path):
    remote = laptop
    assert cli("submit", str(_script(tmp_path, TRUNCATING)), "--name", "cutter", "--docker-host", remote.alias_url, "--image", TEST_IMAGE).returncode == 0
    log = tmp_path / "followed.txt"
    with open(log, "w") as out:
        follower = subprocess.Popen([sys.executable, "-m", "jupyter_trainer", "logs", "cutter", "-f"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "A 1999" in log.read_text(), timeout=90, what="the first part")
        remote.block_ssh()
        name = remote.exec("docker ps -q --filter label=jupyter_trainer=1").output.split()[0]
        remote.exec(["docker", "exec", name, "touch", "/workspace/go"], check=True)
        wait_for(lambda: "L 4999" in remote.exec(["docker", "exec", name, "sh", "-c", "tail -n 1 /tmp/jupyter_trainer/jobs/*/cutter/1/output.log"]).output, timeout=60, what="the job to write again")
        time.sleep(17)  # longer than a silent stream is kept: the follow resumes with a new one
        remote.unblock_ssh()
        wait_for(lambda: "L 4999" in log.read_text(), timeout=120, what="the new text to be followed")
    finally:
        remote.unblock_ssh()
        follower.kill()
        follower.wait()
    lines = log.read_text().splitlines()
    cut = next(index for index, line in enumerate(lines) if "the log was truncated" in line)
    assert lines[:cut] == [f"A {i}" for i in range(2000)]
    assert lines[cut + 1 :] == [f"L {i}" for i in range(5000)]
    assert cli("stop", "cutter").returncode == 0


def test_a_repository_script_runs_in_its_synced_folder_on_the_remote_host(laptop, tmp_path, monkeypatch):
    """A clone's train.py (tests/test_in_place.py's folder): run in place from the line form, pasted
    into a cell, and sent without its folder, on the remote host, in its workdir there."""
    from test_in_place import FILES, TRAIN, facts

    remote = laptop
    project = tmp_path / "word-language-model"
    for name, text in FILES.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    monkeypatch.chdir(project)
    where = f"--docker-host {remote.alias_url} --image {TEST_IMAGE}"
    out = submit_from_a_kernel(f"--name pasted {where} --sync {project} --no-widget -- --epochs 2", TRAIN)
    assert "pasted: " in out, out
    done = cli("submit", "train.py", "--name", "inplace", *where.split(), "--sync", str(project), "--", "--epochs", "1")
    assert done.returncode == 0 and "only train.py was sent" not in done.stdout, done.stdout + done.stderr
    # a workdir of its own there: the others' container has the folder from their --sync
    alone = cli("submit", "train.py", "--name", "alone", *where.split(), "--workdir", "/srv/alone")
    assert alone.returncode == 0 and "only train.py was sent to jt-remote-test, not its folder" in alone.stdout, alone.stdout
    for name in ("pasted", "inplace", "alone"):
        wait_for(lambda: status(name)["status"] not in ("pending", "running"), timeout=120, what=f"{name} to end")
    assert status("pasted")["status"] == "completed", cli("logs", "pasted").stdout
    shown = facts(cli("logs", "pasted").stdout)
    assert shown == {"FILE": "/workspace/pasted.cell.py", "ARGV0": "/workspace/pasted.cell.py", "PATH0": "/workspace", "CWD": "/workspace", "DATA": "1 2 3 | 1 2 3"}
    assert "epoch 1 loss 0.5000 utils ok depth 3" in cli("logs", "pasted").stdout
    assert status("inplace")["status"] == "completed" and facts(cli("logs", "inplace").stdout)["FILE"] == "/workspace/train.py"
    # alone: its first import is the folder's, which is not there; its file is named where it would be
    log = cli("logs", "alone").stdout
    assert status("alone")["status"] == "failed" and 'File "/workspace/train.py", line 5, in <module>\n    import model' in log and "No module named 'model'" in log, log


def test_a_script_in_place_in_a_users_container_on_the_remote_host(laptop, tmp_path, monkeypatch):
    """--sync copies into a container of the user's own working directory (here /app), and the
    script runs in place there, not in /workspace."""
    remote = laptop
    project = tmp_path / "project"
    project.mkdir()
    (project / "helper.py").write_text("WHERE = 'beside it'\n")
    (project / "top.py").write_text("import os, helper\nprint(__file__, os.getcwd(), helper.WHERE)\n")
    remote.client().containers.run(TEST_IMAGE, ["sleep", "infinity"], name="userbox", working_dir="/app", init=True, detach=True)
    monkeypatch.chdir(project)
    done = cli("submit", "top.py", "--name", "theirs", "--docker-host", remote.alias_url, "--container", "userbox", "--sync", str(project))
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: status("theirs")["status"] not in ("pending", "running"), timeout=90, what="the job to end")
    assert cli("logs", "theirs").stdout == "/app/top.py /app beside it\n", cli("logs", "theirs").stdout


def test_a_script_that_lies_on_the_remote_host_only_runs_in_its_workdir_there(laptop, tmp_path, monkeypatch):
    """A clone that exists only on the GPU server (cloned there, in --workdir): SCRIPT is read
    through its engine, kept with the run as submitted, and run in place there; the same line
    attaches, a changed file is another job; a container of the user's sees it through its mounts."""
    import base64

    from test_in_place import FILES, facts

    remote = laptop
    for name, text in FILES.items():
        encoded = base64.b64encode(text.encode()).decode()
        remote.exec(["sh", "-c", f'mkdir -p "$(dirname /srv/clone/{name})" && echo {encoded} | base64 -d > /srv/clone/{name}'], check=True)
    monkeypatch.chdir(tmp_path)  # no train.py here
    where = ["--docker-host", remote.alias_url, "--image", TEST_IMAGE, "--workdir", "/srv/clone"]
    done = cli("submit", "train.py", "--name", "there", *where, "--", "--epochs", "1")
    assert done.returncode == 0 and "was sent" not in done.stdout, done.stdout + done.stderr
    wait_for(lambda: status("there")["status"] not in ("pending", "running"), timeout=120, what="the job to end")
    log = cli("logs", "there").stdout
    assert status("there")["status"] == "completed", log
    assert facts(log) == {"FILE": "/workspace/train.py", "ARGV0": "/workspace/train.py", "PATH0": "/workspace", "CWD": "/workspace", "DATA": "1 2 3 | 1 2 3"}
    record = status("there")
    assert record["options"]["script_path"] == "/srv/clone/train.py", record["options"]
    home = Path(os.environ["JUPYTER_TRAINER_HOME"])
    assert (home / "jobs" / "there" / "1" / "script.py").read_text() == FILES["train.py"]
    # the same line with the same file attaches; once the file changed there, it needs --rerun
    again = cli("submit", "train.py", "--name", "there", *where, "--", "--epochs", "1")
    assert again.returncode == 0 and "attached to it" in again.stdout, again.stdout + again.stderr
    remote.exec(["sh", "-c", "echo '# changed' >> /srv/clone/train.py"], check=True)
    changed = cli("submit", "train.py", "--name", "there", *where, "--", "--epochs", "1")
    assert changed.returncode != 0 and "already ran (completed) with a different script" in changed.stderr, changed.stdout + changed.stderr
    # one line for a file that is nowhere, here or there
    missing = cli("submit", "nothere.py", *where)
    assert missing.returncode != 0 and "cannot read the script /srv/clone/nothere.py on jt-remote-test: there is no such file" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
    outside = cli("submit", "../elsewhere/train.py", *where)
    assert outside.returncode != 0 and "cannot read the script" in outside.stderr and "Traceback" not in outside.stderr, outside.stderr
    # a container of the user's mounting the clone at /code: the script is where its mount puts it
    remote.client().containers.run(
        TEST_IMAGE, ["sleep", "infinity"], name="cloned", working_dir="/code", init=True, detach=True, volumes={"/srv/clone": {"bind": "/code", "mode": "rw"}}
    )
    theirs = cli("submit", "train.py", "--name", "in-theirs", "--docker-host", remote.alias_url, "--container", "cloned", "--workdir", "/srv/clone", "--", "--epochs", "1")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    wait_for(lambda: status("in-theirs")["status"] not in ("pending", "running"), timeout=120, what="the job to end")
    log = cli("logs", "in-theirs").stdout
    assert status("in-theirs")["status"] == "completed" and facts(log)["FILE"] == "/code/train.py" and facts(log)["DATA"] == "1 2 3 | 1 2 3", log


def test_a_script_on_the_remote_host_is_never_guessed_at_and_its_reads_leave_nothing_behind(laptop, tmp_path):
    """The cases where a script in a remote --workdir could be the wrong one, or could not be
    read: each is one line that names it and its host, and nothing is left or made there."""
    remote = laptop
    remote.exec(["sh", "-c", textwrap.dedent("""
        set -e
        mkdir -p /srv/clone
        echo "print('THE CLONE ON THE HOST')" > /srv/clone/train.py
        ln -s /etc /srv/clone/dirlink
        ln -s /etc/shadow /srv/clone/shadow.py
        head -c 8000000 /dev/zero | tr '\\0' '#' > /srv/clone/big.py
    """)], check=True)
    where = ["--docker-host", remote.alias_url, "--image", TEST_IMAGE, "--workdir", "/srv/clone"]

    def refused(*words):
        result = cli("submit", *words)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr and "overlay2" not in result.stderr, result.stderr
        return result.stderr

    # a missing --workdir is said so, and not made there
    said = refused("train.py", *where[:-1], "/srv/nope")
    assert "--workdir /srv/nope does not exist on jt-remote-test" in said, said
    assert remote.exec(["test", "-e", "/srv/nope"]).exit_code != 0
    # a link on the way, or the script itself a link: refused, and no target is suggested
    said = refused("dirlink/passwd", *where)
    assert "dirlink in its path is a link, and links are not followed on the remote host" in said, said
    said = refused("shadow.py", *where)
    assert "it is a link, and links are not followed" in said and "/etc/shadow" not in said, said
    # a path the engine cannot follow names the script and its host, not the engine's files
    said = refused("train.py/x.py", *where)
    assert "cannot read the script /srv/clone/train.py/x.py on jt-remote-test: train.py is not a directory" in said, said
    said = refused("x.py", *where[:-1], "/srv/clone/train.py")
    assert "/srv/clone/train.py on jt-remote-test is not a directory" in said, said

    # a stale copy of this machine's under the same name is not silently run instead of the clone
    Path("train.py").write_text("print('A STALE COPY')\n")
    said = refused("train.py", *where)
    assert "train.py is both a file of this machine" in said and "--workdir /srv/clone on jt-remote-test" in said, said
    assert "give its path there (/srv/clone/train.py)" in said and "copied over the files of --workdir there" in said, said
    assert "THE CLONE" in remote.exec("cat /srv/clone/train.py").output
    Path("train.py").unlink()
    # one that is not in the clone is sent alone, and the way to send its folder says what it does
    Path("mine.py").write_text("print('MINE')\n")
    alone = cli("submit", "mine.py", "--name", "mine", *where)
    assert alone.returncode == 0 and "they are copied over those of --workdir /srv/clone there" in alone.stdout, alone.stdout + alone.stderr

    # a read cut off (the CLI killed while the link hangs) leaves its scratch container: labelled
    # as this store's, it is removed by a prune
    scratch = "docker ps -aq --filter label=jupyter_trainer=1 --filter status=created"
    remote._container.exec_run(["sh", "-c", f"until {scratch} | grep -q .; do sleep 0.02; done; pkill -STOP -x sshd; pkill -STOP -f 'sshd: '"], detach=True)
    reading = subprocess.Popen([sys.executable, "-m", "jupyter_trainer", "submit", "big.py", *where], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: remote.exec(scratch).output.strip(), timeout=60, what="the scratch container")
        time.sleep(1)
        reading.kill()
        reading.communicate()
    finally:
        remote.exec(["sh", "-c", "pkill -CONT -x sshd; pkill -CONT -f 'sshd: '"])
    left = remote.exec(scratch).output.split()
    assert len(left) == 1, left
    pruned = cli("prune", "--containers", "--older-than", "0s")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert not remote.exec(scratch).output.strip(), remote.exec("docker ps -a --format '{{.Names}} {{.Labels}}'").output


def test_restarts_on_the_remote_host_with_the_laptop_offline(laptop):
    """--restarts on a remote engine: its container is restarted while the laptop is offline; the
    container's keeper starts the job again there, from its checkpoint, with nothing of the laptop's."""
    from test_restarts import STEPS, step_lines

    remote = laptop
    submit_from_a_kernel(f"--name remote-restarts --docker-host {remote.alias_url} --image {TEST_IMAGE} --restarts 1 --env SECRET=hunter2 --no-widget -- 60", STEPS)  # 24 s: still training when its container restarts, on a loaded machine too
    wait_for(lambda: status("remote-restarts")["status"] == "running", timeout=60, what="the job to run")
    wait_for(lambda: "step 3" in cli("logs", "remote-restarts").stdout, timeout=60, what="step 3")
    remote.stop_sshd()  # the laptop goes offline
    restarted = remote.exec("docker ps -q --filter label=jupyter_trainer.keeper=1 | xargs -r docker restart -t 2", check=True)
    assert restarted.output.strip(), "a container was restarted"
    time.sleep(8)  # it trains on there, started again, while nothing of ours looks
    remote.start_sshd()
    final = wait_for(lambda: (s := status("remote-restarts"))["status"] != "running" and s, timeout=120, what="the job's end")
    log = cli("logs", "remote-restarts").stdout
    assert final["status"] == "completed" and final["restarts"] == 1, (final, log)
    assert step_lines(log) == [f"step {i}" for i in range(60)], log
    assert "started again after its container restarted (restart 1 of 1)" in log
    assert "restart 1 of 1: the container was restarted (docker restart)" in cli("status", "remote-restarts").stdout
    # what the container needed to start it again (its environment) is no longer kept there
    left = remote.exec("docker ps -aq --filter label=jupyter_trainer.keeper=1 | "
                       "xargs -r -I{} docker exec {} sh -c 'cat /tmp/jupyter_trainer/jobs/*/remote-restarts/1/restart'", check=True)
    assert "hunter2" not in left.output and "arg " not in left.output, left.output


def test_a_quiet_remote_view_sleeps_until_its_stream_brings_a_line(laptop, tmp_path, quiet_comm):
    """A remote log comes to this machine through one stream (a `tail -f` in the container): the view
    is told by it of each line, so a quiet view is polled with the others once a second, not four
    times, and a line wakes it at once. The job's end is still seen by its status checks."""
    from jupyter_trainer.jobs.job import get_job
    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    script = _script(tmp_path, "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(4)\n")
    assert cli("submit", str(script), "--name", "told", "--docker-host", laptop.alias_url, "--image", TEST_IMAGE).returncode == 0
    wait_for(lambda: "tick 0" in cli("logs", "told", "-n", "3").stdout, timeout=60, what="the job to print")
    view = JobWidget(get_job("told"))
    polls = []
    poll = view.poll
    view.poll = lambda now: polls.append(now) or poll(now)
    poller = Poller()
    poller.watch(view)
    try:
        wait_for(lambda: view.watched and view.quiet, timeout=30, what="the view to be told by its stream")
        shown = int(view.log.value.rsplit("tick ", 1)[1].split()[0].split("<")[0])
        polls.clear()
        time.sleep(8)
        # 32 if it were polled four times a second; a beat a second, and each of the two lines
        # printed meanwhile wakes it and is drawn at the next tick, its status checks answered
        assert len(polls) < 22, f"{len(polls)} polls in 8 s"
        assert f"tick {shown + 1}" in view.log.value  # the lines printed meanwhile, every one
        assert view.watched
        assert cli("stop", "told").returncode == 0
        wait_for(lambda: not poller.running, timeout=20, what="the view to see the stop")
        assert "stopped" in view.header.value
    finally:
        poller.forget_all()
        cli("stop", "told")


def test_a_new_job_in_a_removed_runs_place_on_the_host_is_not_shown_the_old_runs_stream(laptop, tmp_path, quiet_comm):
    """A remote job ends, its container stays up, and the run is removed and its name taken again at
    once: the new job runs in the same container, in the same directory, its log a new file where the
    old one was. This kernel still streams the old log (a view of it read it a moment ago), its tail
    following the old file: a view of the new job must show the new job's lines, at once, and none
    of the old one's."""
    from jupyter_trainer.jobs.job import get_job
    from jupyter_trainer.view.job_widget import JobWidget

    host = ["--docker-host", laptop.alias_url, "--image", TEST_IMAGE]
    first = _script(tmp_path, "print('the removed job speaks', flush=True)\n")
    assert cli("submit", str(first), "--name", "same", *host).returncode == 0
    wait_for(lambda: status("same")["status"] == "completed", timeout=90, what="the first job's end")
    old = get_job("same")
    old_stream = old.log_source()
    assert b"the removed job speaks" in old_stream.read(0, 4096)
    wait_for(lambda: old_stream.telling, timeout=10, what="the old log's stream")
    assert cli("rm", "same").returncode == 0, "rm"
    second = _script(tmp_path, "import time\nfor i in range(600):\n    print('the new job at', i, flush=True)\n    time.sleep(0.5)\n")
    assert cli("submit", str(second), "--name", "same", *host).returncode == 0
    try:
        new = get_job("same")
        assert new.record.runtime["container_id"] == old.record.runtime["container_id"]  # the same container
        wait_for(lambda: "the new job at 2" in cli("logs", "same").stdout, timeout=60, what="the new job to print")
        assert old_stream.telling  # read a moment ago, and still up
        view = JobWidget(new)
        shown = lambda: view.poll(time.monotonic()) and "the new job at" in view.log.value  # noqa: E731
        wait_for(shown, timeout=5, what=f"the new job's lines in its view: {view.log.value[-300:]}")
        assert "the removed job speaks" not in view.log.value
    finally:
        cli("stop", "same")


def test_a_remote_host_keeps_its_own_line_of_gpus(laptop, home, tmp_path, monkeypatch):
    """--gpus N on a remote host waits in that host's line (its lines directory, there), not in the
    laptop's: the second job waits, through the engine the laptop sees it wait, and it starts once
    the first lets its GPU go."""
    remote = laptop
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")  # the pool names the remote host's GPUs
    script = tmp_path / "hold.py"
    script.write_text("import os, time\nprint('gpus', os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)\ntime.sleep(8)\n")
    for name in ("one", "two"):
        submitted = cli("submit", str(script), "--name", name, "--docker-host", remote.url, "--image", TEST_IMAGE, "--gpus", "1")
        assert submitted.returncode == 0, submitted.stderr
    waiting = wait_for(lambda: (lambda shown: shown if "next in line" in shown["reason"] else None)(status("two")), what="the second to wait in line")
    assert waiting["status"] == "pending" and waiting["reason"].startswith("waiting for 1 GPU; next in line"), waiting
    assert waiting["position"] == 1
    tickets = remote.exec("ls /var/tmp/jupyter-trainer-lines/gpus/tickets").output
    assert tickets.count("r-") == 1 and tickets.count("w-") == 1, tickets
    assert not (home.parent / "lines").exists()  # the laptop's own lines are not used
    wait_for(lambda: status("two")["status"] == "completed", timeout=60, what="the second job to have its turn and end")
    assert status("one")["status"] == "completed" and status("two")["gpus"] == [0]
    assert "gpus 0" in cli("logs", "two").stdout
