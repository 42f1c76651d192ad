import re

import pytest

from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.logs.reading import (
    LogCursor,
    MetricParser,
    clean_line,
    literal_first,
    tail_lines,
)
from jupyter_trainer.spec.job_spec import Metric


class CountingSource(FileLogSource):
    def __init__(self, path):
        super().__init__(path)
        self.bytes_read = 0

    def read(self, offset, limit):
        data = super().read(offset, limit)
        self.bytes_read += len(data)
        return data


@pytest.fixture
def log(tmp_path):
    return tmp_path / "output.log"


def test_tail_reads_only_the_end(log):
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    source = CountingSource(log)
    assert tail_lines(source, 3, block_size=512, max_block_size=1024) == ["line 99997", "line 99998", "line 99999"]
    assert source.bytes_read <= 2048


def test_tail_of_short_and_empty_logs(log):
    log.write_text("")
    assert tail_lines(FileLogSource(log), 5) == []
    log.write_text("a\nb")  # the last line is not ended yet
    assert tail_lines(FileLogSource(log), 5) == ["a", "b"]
    assert tail_lines(FileLogSource(log), 0) == []


def test_progress_bars_collapse_and_colours_go():
    assert clean_line("  0%|   | 0/10\r 50%|#  | 5/10\r100%|###| 10/10\r\n") == "100%|###| 10/10"
    assert clean_line("\x1b[31mred\x1b[0m text") == "red text"
    assert clean_line("\x1b[31mred\x1b[0m", strip_ansi=False) == "\x1b[31mred\x1b[0m"


def test_cursor_returns_whole_lines_and_resumes(log):
    source = FileLogSource(log)
    log.write_bytes(b"one\ntw")
    cursor = LogCursor()
    assert cursor.read(source) == ["one"] and cursor.pending == "tw"
    with open(log, "ab") as handle:
        handle.write(b"o\nthree\n")
    assert cursor.read(source) == ["two", "three"]
    assert cursor.read(source) == [] and cursor.offset == log.stat().st_size


def test_cursor_reads_in_bounded_chunks(log):
    log.write_bytes(b"x" * 10 + b"\n" + b"y" * 10 + b"\n")
    cursor = LogCursor(chunk_size=8)
    lines = []
    for _ in range(5):
        lines += cursor.read(FileLogSource(log))
    assert lines == ["x" * 10, "y" * 10]


def test_multibyte_characters_split_across_reads(log):
    log.write_bytes("é\n".encode() * 3)
    cursor = LogCursor(chunk_size=1)
    lines = []
    for _ in range(10):
        lines += cursor.read(FileLogSource(log))
    assert lines == ["é", "é", "é"]


def test_metrics():
    parser = MetricParser([Metric("loss", r"loss=([0-9.]+)"), Metric("acc", r"acc=([0-9.]+)")])
    assert parser.scan(b"epoch 1 loss=0.5 acc=0.9\nepoch 2 loss=0.4\n") == [("loss", [b"0.5", b"0.4"]), ("acc", [b"0.9"])]
    assert parser.scan(b"nothing\n") == [("loss", []), ("acc", [])]


def test_metrics_that_cannot_match_bytes_match_the_decoded_text():
    parser = MetricParser([Metric("verlust", r"Verlust·(\d+\.\d+)"), Metric("acc", r"(?u)acc=(\w+)")])
    line = "Verlust·0.75 acc=ü9\n".encode()
    assert parser.scan(line) == [("verlust", ["0.75"]), ("acc", ["ü9"])]


def test_a_leading_word_boundary_is_moved_behind_the_word_with_the_same_matches():
    cases = {
        r"\bloss\b\s*[:=]?\s*([\d.]+)": r"loss(?<=\bloss)\b\s*[:=]?\s*([\d.]+)",
        r"\blos{2}=([\d.]+)": r"lo(?<=\blo)s{2}=([\d.]+)",
        r"\bl?oss=([\d.]+)": r"\bl?oss=([\d.]+)",  # nothing to move
        r"val_loss=([\d.]+)": r"val_loss=([\d.]+)",
        r"\bacc|\bf1=([\d.]+)": r"acc(?<=\bacc)|\bf1=([\d.]+)",
    }
    lines = ["loss=1", "train_loss=2", "(loss: 3)", "loss_scale: 4", "xloss 5", "lossy=6", "acc f1=7", "los=8", "lo=9"]
    for original, rewritten in cases.items():
        assert literal_first(original) == rewritten
        for line in lines:
            assert re.findall(rewritten, line) == re.findall(original, line), (original, line)
