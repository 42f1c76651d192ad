"""The time each test file takes (setup, call and teardown of its tests, added up), said at the
end of a run: the 15 slowest, and any file past FILE_BUDGET_S named as too slow."""

from collections import defaultdict

import pytest

FILE_BUDGET_S = 240.0  # a file past this has grown past a few minutes: split it or make it faster
SHOWN = 15


class FileTimes:
    def __init__(self):
        self.seconds = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter):
        if not self.seconds:
            return
        ranked = sorted(self.seconds.items(), key=lambda item: item[1], reverse=True)
        terminalreporter.write_sep("=", f"the {min(SHOWN, len(ranked))} slowest test files")
        for path, seconds in ranked[:SHOWN]:
            terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
        for path, seconds in ranked:
            if seconds > FILE_BUDGET_S:
                terminalreporter.write_line(
                    f"test file over its {FILE_BUDGET_S:.0f} s budget: {path} ({seconds:.0f} s)", yellow=True
                )


# Seconds each file took in a whole run here (tests' own durations added up, two cores): .ci/run's
# workers take files one at a time in collection order, so the slowest go first and the run does
# not end waiting on one long file handed out last. A file not listed counts as DEFAULT_S.
EXPECTED_S: dict[str, float] = {
    "tests/test_sagemaker.py": 425,
    "tests/test_reliability.py": 345,
    "tests/test_remote_jobs.py": 314,
    "tests/test_browser.py": 283,
    "tests/test_remote_status.py": 150,
    "tests/test_real_outputs.py": 204,
    "tests/test_hostile.py": 166,
    "tests/test_restarts_hostile.py": 152,
    "tests/test_slurm.py": 175,
    "tests/test_restarts.py": 121,
    "tests/test_slurm_accounting.py": 116,
    "tests/test_one_series.py": 109,
    "tests/test_notebooks.py": 108,
    "tests/test_detached.py": 85,
    "tests/test_housekeeping.py": 66,
    "tests/test_sagemaker_hostile.py": 52,
}
DEFAULT_S = 30.0


def slowest_first(items) -> None:
    """Reorder collected tests so that files expected to take longest come first; each file's own
    tests keep their order (module fixtures are set up once)."""
    def file_of(item):
        return item.nodeid.split("::", 1)[0]

    items.sort(key=lambda item: -EXPECTED_S.get(file_of(item), DEFAULT_S))
