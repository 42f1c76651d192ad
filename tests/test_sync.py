"""--sync: what leaves the laptop (the archive handed to the engine), without an engine: no secret, and
nothing the directory's .trainerignore lists. The same over real SSH: tests/test_remote_jobs.py."""

import io
import os
import tarfile

import pytest

from jupyter_trainer.backends.docker.sync import IGNORE_FILE, sync_directory
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.spec.checks import parse_sync
from jupyter_trainer.spec.ignore_patterns import IgnoreRules, parse


class ArchiveTaker:
    """A container's put_archive: keeps what it was handed."""

    def __init__(self):
        self.names = None

    def put_archive(self, path, data):
        with tarfile.open(fileobj=io.BytesIO(data.read())) as tar:
            self.names = sorted(member.name for member in tar.getmembers())
        return True


def synced(directory, store_home=None):
    taker = ArchiveTaker()
    facts = sync_directory(taker, str(directory), "/workspace", store_home or directory / "no-store")
    return [name for name in taker.names if name != "."], facts


def write(root, *paths):
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")


def test_a_home_directory_or_one_holding_it_is_refused_in_one_line(tmp_path, monkeypatch):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for refused in (str(home), "~", str(tmp_path / "users"), str(tmp_path), str(home) + "/."):
        with pytest.raises(InvalidOption, match="home directory") as caught:
            parse_sync(refused)
        assert "nothing was copied" in str(caught.value) and "\n" not in str(caught.value)
    (home / "project").mkdir()
    assert parse_sync("~/project") == str(home / "project")
    os.symlink(home, tmp_path / "link-to-home")
    with pytest.raises(InvalidOption, match="is your home directory"):
        parse_sync(str(tmp_path / "link-to-home"))


def test_credentials_are_left_out_wherever_they_lie_and_named(tmp_path):
    project = tmp_path / "project"
    write(project, "train.py", ".netrc", ".git-credentials", ".pypirc", ".cache/huggingface/token", ".config/gh/hosts.yml",
          ".local/share/jupyter/runtime/jpserver-1.json", "deep/er/.ssh/id_ed25519", "keys/id_rsa", "keys/id_rsa.pub",
          ".aws/credentials", ".config/git/credentials", ".kube/config", ".docker/config.json", "notes.txt")
    names, facts = synced(project)
    assert names == [".cache", ".cache/huggingface", ".config", ".config/git", ".local", ".local/share", ".local/share/jupyter",
                     "deep", "deep/er", "keys", "keys/id_rsa.pub", "notes.txt", "train.py"]
    (fact,) = facts
    assert fact.startswith("--sync left out credentials: .aws, .cache/huggingface/token, .config/gh, .config/git/credentials, .docker, ")
    assert fact.endswith(".local/share/jupyter/runtime and 4 more")


def test_no_credential_is_named_when_none_was_there(tmp_path):
    write(tmp_path / "p", "train.py")
    assert synced(tmp_path / "p") == (["train.py"], [])


def test_the_job_store_inside_the_directory_is_left_out(tmp_path):
    project = tmp_path / "project"
    write(project, "train.py", "store/jobs/a/1/script.py", "store/key")
    assert synced(project, store_home=project / "store")[0] == ["train.py"]


def test_the_ignore_file_leaves_out_what_it_lists(tmp_path):
    project = tmp_path / "project"
    write(project, "train.py", "data/a.bin", "data/keep.txt", "data/sub/b.bin", "checkpoints/last.pt", "runs/x/events",
          "src/model.py", "src/__pycache__/model.pyc", "wandb/run-1/log", "notes.md", "README.md")
    (project / IGNORE_FILE).write_text(
        "# big things stay home\n\n/checkpoints\n./runs/\ndata/**\n!data/keep.txt\n**/__pycache__\nwandb\n*.md\n!README.md\n"
    )
    names, _ = synced(project)
    assert names == [IGNORE_FILE, "README.md", "data", "data/keep.txt", "src", "src/model.py", "train.py"]


@pytest.mark.parametrize(
    "pattern, path, ignored",
    [
        ("*.pt", "last.pt", True),
        ("*.pt", "ckpt/last.pt", False),  # `*` stays within a segment, as .dockerignore's
        ("**/*.pt", "ckpt/last.pt", True),
        ("**/*.pt", "last.pt", True),
        ("data", "data/x/y", True),  # a directory's contents go with it
        ("da?a", "data", True),
        ("[a-c]at", "bat", True),
        ("[!a-c]at", "bat", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        (r"\*literal", "*literal", True),
        ("[unclosed", "[unclosed", True),
    ],
)
def test_patterns_as_dockerignore_reads_them(pattern, path, ignored):
    assert IgnoreRules(parse(pattern)).ignored(path) is ignored


def test_the_last_matching_line_decides(tmp_path):
    rules = IgnoreRules(parse("*.log\n!important.log\nimportant.log\n"))
    assert rules.ignored("important.log") and rules.ignored("x.log")


def test_an_ignore_file_that_is_not_a_file_is_one_line(tmp_path):
    project = tmp_path / "project"
    write(project, "train.py")
    os.mkfifo(project / IGNORE_FILE)  # a read would block for good
    with pytest.raises(InvalidOption, match=r"--sync cannot read .*\.trainerignore"):
        synced(project)


def test_links_fifos_and_sockets_stay_what_they_are(tmp_path):
    import socket

    project = tmp_path / "project"
    write(project, "train.py")
    os.symlink("/etc/passwd", project / "passwd")  # a link, never what it points to
    os.mkfifo(project / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(project / "sock"))
    try:
        taker = ArchiveTaker()
        sync_directory(taker, str(project), "/workspace", tmp_path / "store")
    finally:
        sock.close()
    assert taker.names == [".", "passwd", "pipe", "train.py"]


def test_a_credential_directory_or_one_in_it_is_refused_and_home_relative_names_count(tmp_path, monkeypatch):
    home = tmp_path / "home"
    write(home, ".aws/credentials", ".ssh/my_deploy_key", ".config/gh/hosts.yml", ".config/other/settings",
          ".cache/huggingface/token", ".cache/pip/x", ".local/share/jupyter/runtime/jpserver-1.json", ".local/share/other/x")
    monkeypatch.setenv("HOME", str(home))
    for refused in (".aws", ".ssh", ".config/gh", ".local/share/jupyter/runtime", ".cache/huggingface/token"):
        if (home / refused).is_dir():
            with pytest.raises(InvalidOption, match="where credentials are kept"):
                parse_sync(str(home / refused))
    # a directory that holds one: what lies under it is named from home, so the credential is known
    assert synced(home / ".config")[0] == ["other", "other/settings"]
    assert synced(home / ".cache")[0] == ["huggingface", "pip", "pip/x"]
    assert synced(home / ".local")[0] == ["share", "share/jupyter", "share/other", "share/other/x"]


def test_case_variants_keys_env_files_and_hard_links_to_secrets_are_left_out(tmp_path, monkeypatch):
    home = tmp_path / "home"
    write(home, ".aws/credentials")
    monkeypatch.setenv("HOME", str(home))
    project = tmp_path / "project"
    write(project, "train.py", ".Netrc", "key.pem", "server.key", ".env", "data.csv")
    os.link(home / ".aws" / "credentials", project / "credentials")
    names, facts = synced(project)
    assert names == ["data.csv", "train.py"]
    assert facts == ["--sync left out credentials: .Netrc, .env, credentials, key.pem, server.key"]


def test_an_ignore_file_too_long_to_be_written_by_hand_is_refused_not_cut(tmp_path):
    from jupyter_trainer.spec.ignore_patterns import MAX_PATTERNS

    project = tmp_path / "project"
    write(project, "train.py", "secret.txt")
    (project / IGNORE_FILE).write_text("# note\n" * MAX_PATTERNS + "secret.txt\n")
    with pytest.raises(InvalidOption, match="more than the 10,000 an ignore file may have"):
        synced(project)
    (project / IGNORE_FILE).write_text("#" * (2 << 20) + "\nsecret.txt\n")
    with pytest.raises(InvalidOption, match=r"--sync cannot use .*\.trainerignore: it is larger than 1 MiB"):
        synced(project)


def test_many_patterns_cost_a_few_matches_a_path(tmp_path):
    rules = IgnoreRules(parse("\n".join(f"dir{index}/*.bin" for index in range(5000)) + "\n!keep.bin\n**/*.tmp\n"))
    assert len(rules.runs) == 3
    assert rules.ignored("dir4999/a.bin") and not rules.ignored("keep.bin") and rules.ignored("x/y.tmp") and not rules.ignored("a.py")
