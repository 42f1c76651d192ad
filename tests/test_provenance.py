"""What produced a run, for every job: its parameters, the git commit of the repository its working
directory lies in, whether that tree was dirty, the uncommitted diff kept with the run (bounded,
never left out silently), a container job's image id; and `compare` saying what differs.

Real jobs on this machine (--host) and in the tests' engine, real git repositories made here."""

import json
import os
import subprocess

import pytest
from test_lines import cli_json, cli_text

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.store import GIT_DIFF_FILE
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.jobs.provenance import BIG_FILE, DIFF_LIMIT
from jupyter_trainer.jobs.submit import submit_detached

SCRIPT = "print('trained')\n"


def git(repo, *words, env=None):
    return subprocess.run(["git", "-C", str(repo), *words], capture_output=True, check=True, env=env).stdout


def committed(repo, files):
    """A repository holding `files` (name -> text), all committed."""
    repo.mkdir(exist_ok=True)
    git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=me@example.org", "-c", "user.name=me", "commit", "-qm", "first")
    return git(repo, "rev-parse", "HEAD").decode().strip()


def run_in(workdir, store, name, args=(), **options):
    spec = build_spec(SCRIPT, host=True, image=None, container=None, workdir=str(workdir), args=list(args), **options)
    job = submit_detached(spec, name=name, store=store).job
    assert job.wait(timeout=60).is_final
    return job


def status(store, name):
    return cli_json(["status", name, "--json"], store)


def kept_diff(store, name):
    path = Job.load(name, store).run_dir / GIT_DIFF_FILE
    return path.read_bytes() if path.exists() else None


def test_a_job_in_a_clean_repository_records_its_commit_and_keeps_no_diff(store, tmp_path):
    repo = tmp_path / "repo"
    head = committed(repo, {"train.py": SCRIPT})
    run_in(repo, store, "clean")
    assert status(store, "clean")["git"] == {"commit": head, "dirty": False, "untracked": 0, "diff": {"kept": 0, "bytes": 0, "whole": True}}
    assert kept_diff(store, "clean") is None


def test_a_dirty_tree_s_diff_is_kept_with_the_run_as_git_gives_it(store, tmp_path):
    """From a subdirectory of the repository: the diff is the whole tree's, binary files included."""
    repo = tmp_path / "repo"
    head = committed(repo, {"train.py": SCRIPT, "src/model.py": "layers = 2\n", "weights.bin": "\0\1\2"})
    (repo / "src" / "model.py").write_text("layers = 3\n")
    (repo / "weights.bin").write_bytes(bytes(range(256)))
    (repo / "notes.txt").write_text("not tracked\n")
    run_in(repo / "src", store, "dirty")
    found = status(store, "dirty")["git"]
    expected = git(repo, "diff", "HEAD", "--binary")
    assert found == {"commit": head, "dirty": True, "untracked": 1, "diff": {"kept": len(expected), "bytes": len(expected), "whole": True}}
    assert kept_diff(store, "dirty") == expected and b"layers = 3" in expected and b"GIT binary patch" in expected


def test_a_diff_past_its_limit_is_cut_and_the_record_says_how_long_it_was(store, tmp_path):
    repo = tmp_path / "repo"
    files = {f"part{index}.txt": "".join(f"line {n}\n" for n in range(60000)) for index in range(3)}
    committed(repo, {"train.py": SCRIPT, **files})
    for name, text in files.items():
        (repo / name).write_text(text.replace("line", "LINE"))
    run_in(repo, store, "long")
    whole = git(repo, "diff", "HEAD", "--binary")
    assert len(whole) > DIFF_LIMIT and all(os.path.getsize(repo / name) < BIG_FILE for name in files)
    assert status(store, "long")["git"]["diff"] == {"kept": DIFF_LIMIT, "bytes": len(whole), "whole": False}
    assert kept_diff(store, "long") == whole[:DIFF_LIMIT]


def test_a_big_changed_file_is_named_not_diffed_and_the_code_s_change_is_kept(store, tmp_path):
    """A dataset or a checkpoint in the tree, changed: git would read all of it (a 1 GB one took past
    git's time and nothing was kept); it is named with its size, and the diff holds the rest."""
    repo = tmp_path / "repo"
    committed(repo, {"train.py": SCRIPT, "data/big.csv": "a,b\n", "data/small.csv": "a,b\n"})
    (repo / "data" / "big.csv").write_bytes(b"1,2\n" * (BIG_FILE // 4 + 1000))
    (repo / "data" / "small.csv").write_text("a,b\n1,2\n")
    (repo / "train.py").write_text(SCRIPT + "print('changed')\n")
    run_in(repo, store, "big")
    found = status(store, "big")["git"]["diff"]
    assert found["left_out"] == [{"path": "data/big.csv", "bytes": os.path.getsize(repo / "data" / "big.csv")}]
    assert found["whole"] is False and "left_out_more" not in found
    diff = kept_diff(store, "big")
    assert b"print('changed')" in diff and b"data/small.csv" in diff and b"big.csv" not in diff
    assert found["kept"] == found["bytes"] == len(diff)


def test_nothing_of_the_repository_s_own_config_runs(store, tmp_path):
    """Filter drivers, an fsmonitor, diff drivers and hooks a repository's config names: none runs
    (a container job's repository would else run commands outside its container). A filter's
    `process` command ran before."""
    repo = tmp_path / "repo"
    committed(repo, {"train.py": SCRIPT})
    ran = tmp_path / "ran"
    ran.mkdir()
    (repo / ".gitattributes").write_text("* filter=evil.one diff=evil\n")
    for key, what in {
        "filter.evil.one.clean": "clean",
        "filter.evil.one.smudge": "smudge",
        "filter.evil.one.process": "process",
        "filter.evil.one.required": None,
        "diff.evil.textconv": "textconv",
        "diff.evil.command": "command",
        "core.fsmonitor": "fsmonitor",
        "core.pager": "pager",
    }.items():
        git(repo, "config", key, "true" if what is None else f"touch {ran}/{what}; cat")
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {ran}/{hook}\n")
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    (repo / "train.py").write_text(SCRIPT + "print('changed')\n")
    run_in(repo, store, "evil")
    assert sorted(os.listdir(ran)) == []
    found = status(store, "evil")["git"]
    assert found["dirty"] is True and found["diff"]["whole"] is True
    assert b"+print('changed')" in kept_diff(store, "evil")


def test_a_job_outside_any_repository_has_no_git(store, workdir):
    run_in(workdir, store, "plain")
    assert "git" not in status(store, "plain")


def test_params_and_what_differs_between_two_runs(store, tmp_path):
    """Two runs of one script, one argument apart, the second after a commit: params are a sweep's
    values ({} for these); compare (text and --json) shows the arguments and the commit that differ."""
    repo = tmp_path / "repo"
    first = committed(repo, {"train.py": SCRIPT})
    run_in(repo, store, "a", args=["--lr", "0.1"])
    (repo / "train.py").write_text(SCRIPT + "# tuned\n")
    git(repo, "-c", "user.email=me@example.org", "-c", "user.name=me", "commit", "-qam", "second")
    second = git(repo, "rev-parse", "HEAD").decode().strip()
    run_in(repo, store, "b", args=["--lr", "0.01"])
    assert status(store, "a")["params"] == {} == status(store, "b")["params"]
    text = cli_text(["compare", "a", "b"], store)
    assert "what differs:" in text, text
    said = text.split("what differs:")[1]
    assert "0.1" in said and "0.01" in said and first[:7] in said and second[:7] in said, said
    rows = {row["name"]: row.get("differs") for row in cli_json(["compare", "a", "b", "--json"], store)}
    assert set(rows) == {"a", "b"} and rows["a"] != rows["b"], rows
    assert json.dumps(rows["a"]).count("0.1") >= 1 and first[:7] in json.dumps(rows["a"]), rows


@pytest.mark.usefixtures("docker_image")
def test_a_container_job_records_its_image_s_id(store, workdir, docker_client, docker_image):
    spec = build_spec(SCRIPT, image=docker_image, workdir=str(workdir))
    job = submit_detached(spec, name="boxed", store=store).job
    assert job.wait(timeout=120).is_final
    assert status(store, "boxed")["image_id"] == docker_client.images.get(docker_image).id
