import json
import os
import stat

import pytest

from jupyter_trainer.core.record import JobRecord, Status
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import CorruptRecord, UnknownJob


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_records_are_private(store):
    store.create(JobRecord(name="a", backend="host"))
    run_dir = store.run_dir("a", 1)
    assert mode(store.home / "jobs") == 0o700
    assert mode(run_dir.parent) == 0o700 and mode(run_dir) == 0o700
    assert mode(run_dir / "record.json") == 0o600
    store.fingerprint_key()
    assert mode(store.home / "fingerprint.key") == 0o600


def test_a_run_is_claimed_once(store):
    store.create(JobRecord(name="a", backend="host"))
    with pytest.raises(FileExistsError):
        store.create(JobRecord(name="a", backend="host"))
    store.create(JobRecord(name="a", backend="host", run=2))
    assert store.runs("a") == [1, 2] and store.load("a").run == 2


def test_update_is_read_modify_write(store):
    store.create(JobRecord(name="a", backend="host"))

    def finish(record):
        record.status = Status.COMPLETED

    store.update("a", 1, finish)
    assert store.load("a").status is Status.COMPLETED
    assert not [name for name in os.listdir(store.run_dir("a", 1)) if name.endswith(".tmp")]


def test_unknown_job(store):
    with pytest.raises(UnknownJob, match="no job named 'nope'"):
        store.load("nope")


def test_corrupt_record_is_reported_alone(store):
    for name in ("good1", "bad", "good2"):
        store.create(JobRecord(name=name, backend="host"))
    path = store.run_dir("bad", 1) / "record.json"
    path.write_text(path.read_text()[:20])
    with pytest.raises(CorruptRecord, match="'bad'"):
        store.load("bad")
    items = list(store.records())
    assert [item.name for item in items if isinstance(item, JobRecord)] == ["good1", "good2"]
    assert [str(item) for item in items if isinstance(item, CorruptRecord)][0].count("\n") == 0


def test_foreign_entries_in_the_jobs_dir_are_ignored(store):
    store.create(JobRecord(name="a", backend="host"))
    (store.jobs_dir / ".hidden").mkdir()
    (store.jobs_dir / "has space").mkdir()
    assert store.names() == ["a"]


def test_fingerprint_key_is_stable(store):
    key = store.fingerprint_key()
    assert len(key) == 32 and JobStore(store.home).fingerprint_key() == key


def test_record_file_is_plain_json(store):
    store.create(JobRecord(name="a", backend="host", options={"env_keys": ["K"]}))
    data = json.loads((store.run_dir("a", 1) / "record.json").read_text())
    assert data["name"] == "a" and data["status"] == "pending"


def test_an_existing_home_keeps_its_permissions(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    store = JobStore(shared)
    store.create(JobRecord(name="a", backend="host"))
    assert mode(shared) == 0o755 and mode(shared / "jobs") == 0o700


def test_a_half_created_run_hides_nothing(store):
    store.create(JobRecord(name="a", backend="host", status=Status.COMPLETED))
    store.run_dir("a", 2).mkdir()  # a process died between claiming run 2 and writing its record
    assert store.latest_run("a") == 1 and store.load("a").run == 1
    assert [r.name for r in store.records()] == ["a"]


def test_the_supervisor_writes_the_run_files_the_store_names():
    import re
    from importlib import resources

    from jupyter_trainer.core import store

    source = resources.files("jupyter_trainer.backends").joinpath(store.SUPERVISOR_FILE).read_text()
    written = set(re.findall(r'"\$run_dir/([^"]+)"', source))
    assert written == {store.LOG_FILE, store.PID_FILE, store.EXIT_CODE_FILE, store.NOTIFY_FILE, store.NOTIFIED_FILE, store.CLOCK_FILE}
    from jupyter_trainer.backends.base import notifier_source  # it runs alone: the supervisor opens its files

    source = notifier_source().decode()
    assert not any(f"{quote}{name}{quote}" in source for name in (store.NOTIFIED_FILE, store.LOG_FILE) for quote in "'\"")
