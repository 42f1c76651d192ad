"""Entries a job puts beside its run under the names the store gives what it leaves half-done
(`.creating-`, `.removing-`, a run's number): a link or a file there is the job's doing, never
taken for the store's, so rm and prune neither follow it nor fail on it."""

import os
import time

from jupyter_trainer.core.store import ABANDONED_AFTER
from jupyter_trainer.jobs.housekeeping import prune, remove_runs


def _planted(job_dir, kept):
    """Links to a directory of the user's and plain files, under each name the store uses."""
    past = time.time() - ABANDONED_AFTER - 1
    for number, prefix in enumerate((".creating-", ".removing-", "")):
        link = job_dir / f"{prefix}{number + 10}{'-deadbeef' if prefix else ''}"
        link.symlink_to(kept)
        os.utime(link, (past, past), follow_symlinks=False)
        (job_dir / f"{prefix}{number + 20}{'-deadbeef' if prefix else ''}").write_text("")


def test_links_and_files_under_the_stores_names_are_neither_abandoned_nor_leftovers(home, store, tmp_path):
    kept = tmp_path / "users-data"
    kept.mkdir()  # empty and old: were it taken for a run, it would look abandoned
    job_dir = home / "jobs" / "planted"
    making = job_dir / ".creating-1-0123abcd"  # what a killed submission left
    making.mkdir(parents=True)
    removing = job_dir / ".removing-2-0123abcd"  # what a removal could not finish
    removing.mkdir()
    _planted(job_dir, kept)

    assert store.abandoned("planted") == [(1, making)]
    assert store.leftovers("planted") == [(2, removing)]
    removal = remove_runs("planted", store=store)
    assert removal.abandoned == ["planted (run 1)"] and removal.finished == ["planted (run 2)"]
    assert kept.is_dir() and not making.exists() and not removing.exists()


def test_prune_passes_over_links_and_files_under_the_stores_names(home, store, tmp_path):
    kept = tmp_path / "users-data"
    kept.mkdir()
    (kept / "precious").write_text("keep me\n")
    job_dir = home / "jobs" / "planted"
    job_dir.mkdir(parents=True)
    _planted(job_dir, kept)

    removal = prune(older_than=0, store=store)
    assert removal.problems == [] and removal.abandoned == [] and removal.finished == []
    assert (kept / "precious").read_text() == "keep me\n"
