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
