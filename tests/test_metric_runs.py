"""Runs of same-shaped lines read in bulk (metric_runs) give exactly what reading every line one by
one gives: the same points in the same order, each printed where the reader says, and the same
reader state after. Each log here is read both ways and compared; the logs are the shapes whose
digits could make two lines of one shape read differently (steps that repeat or go back, numbers
of every form, digits in names, fractions, settings, splits), and random mixtures of them."""

from __future__ import annotations

import json
import random

import pytest
from test_one_series import difference, points_read_in_pieces

from jupyter_trainer.metrics import reader as metrics
from jupyter_trainer.metrics.reader import MetricReader


def reading(data: bytes, in_bulk: bool, monkeypatch, piece: int = 1 << 20) -> tuple[list, dict]:
    """(points with where each was printed, the reader's state after), read in pieces of `piece`."""
    monkeypatch.setattr(metrics, "BULK_BYTES", 8192 if in_bulk else 1 << 62)
    points: list[tuple] = []
    reader = MetricReader(lambda point: points.append(comparable((*point, reader.given_at))))
    for at in range(0, len(data), piece):
        reader.feed(data[at : at + piece])
    state = json.dumps(reader.state(), sort_keys=True)
    reader.flush()
    return points, state


def comparable(point: tuple) -> tuple:
    return tuple("nan" if value != value else value for value in point)  # nan is not nan


def batches(data: bytes, monkeypatch) -> dict[str, list]:
    """Each metric's points as a reader with a batch sink gives them."""
    monkeypatch.setattr(metrics, "BULK_BYTES", 8192)
    series: dict[str, list] = {}

    def add(point):
        series.setdefault(point[0], []).append(comparable(point[1:]))

    def add_many(name, axis, xs, values, offsets):
        series.setdefault(name, []).extend(comparable((axis, x, value)) for x, value in zip(xs, values))
        assert len(offsets) == len(xs)

    reader = MetricReader(add, bulk=add_many)
    reader.feed(data)
    reader.flush()
    return series


def lines(make, count: int) -> bytes:
    return "".join(make(i) + "\n" for i in range(count)).encode()


LOGS = {
    "steps crossing digit widths": lambda: lines(lambda i: f"step {i} loss: {1 / (i + 1):.6f} lr: {0.001 * (1 - i / 5000):.5f}", 3000),
    "negative values and exponents": lambda: lines(lambda i: f"step: {i} reward: {-i * 0.37:.3f} lr={1.5e-5 * (i + 1):.3e} kl {i * 1e-7:.2E}", 2000),
    "a name back at its step after another's": lambda: lines(lambda i: f"step {i // 8 * 2 + (i % 2)} {'acc' if i % 2 else 'loss'}: {i * 0.1:.1f}", 2000),
    "numbered values, then steps, then numbered again": lambda: lines(lambda i: f"val loss: {i * 0.1:.1f}", 400) + lines(lambda i: f"step {i} loss: {i:.1f}", 400) + lines(lambda i: f"val loss: {i * 0.2:.1f}", 400),
    "a step that repeats or goes back": lambda: lines(lambda i: f"step {i // 3 if i % 50 else 7} loss: {i % 17 * 0.1:.4f}", 3000),
    "the same value again": lambda: lines(lambda i: f"step {i} loss: {0.5 if i % 7 else 0.25:.2f}", 2000),
    "non-finite steps and values": lambda: lines(lambda i: f"step {i if i % 97 else 10 ** 400} loss: {i * 0.001:.3f}" if i % 89 else f"step {i} loss: nan", 3000),
    "digits in names": lambda: lines(lambda i: f"step {i // 10} class_{i % 10}_acc: {i % 13 * 0.01:.2f} top5 acc: 0.{i % 9}", 3000),
    "numbers in and before names": lambda: lines(lambda i: f"step {i} head-{i % 4}-loss: {i % 5 * 0.2:.1f} layer {i % 3} loss: {i:.1f}", 2000),
    "fractions": lambda: lines(lambda i: f"step {i} accuracy: {i % 100}/{100 + i % 3} loss: {i * 0.01:.2f}", 2000),
    "splits": lambda: lines(lambda i: (f"val loss: {i * 0.01:.2f} val acc: {i % 9 * 0.1:.1f}" if i % 5 == 4 else f"step {i} loss: {i * 0.02:.2f}"), 3000),
    "test set lines": lambda: lines(lambda i: f"Test set: Average loss: {i * 0.001:.4f}, Accuracy: {i % 100}/100 ({i % 100}%)", 2000),
    "epoch dicts": lambda: lines(lambda i: f"{{'loss': {2 - i / 1000:.4f}, 'grad_norm': {1 + i % 7 / 10:.4f}, 'learning_rate': {5e-5 * (1 - i / 2000):.4e}, 'epoch': {i / 100:.2f}}}", 2000),
    "epochs after a step": lambda: b"step 5 loss: 1.0\n" + lines(lambda i: f"epoch: {i} loss: {i * 0.1:.2f}", 1000),
    "no step at all": lambda: b"batch_size = 32\n" + lines(lambda i: f"loss: {i % 23 * 0.05:.2f} acc: {i % 7 * 0.1:.1f}", 3000),
    "a step with a total": lambda: lines(lambda i: f"Step [{i % 100 + 1}/100] loss: {i * 0.01:.2f}", 2000),
    "float steps": lambda: lines(lambda i: f"step: {i * 0.5} loss: {i * 0.01:.2f}", 2000),
    "settings": lambda: lines(lambda i: f"lr = {i * 1e-4:.4f}", 1000) + lines(lambda i: f"  LOSS_WEIGHT: {i}.0", 1000) + lines(lambda i: f"step {i} loss: {i:.1f}", 1000),
    "pipe reports": lambda: lines(lambda i: f"| epoch {i // 50 + 1:3d} | {i % 50 * 20:5d}/ 1000 batches | lr 20.00 | loss {7 - i / 1000:5.2f} | ppl {i + 100:8.2f}", 2000),
    "pipes with steps": lambda: lines(lambda i: f" iteration {i:8d}/ 5000 | lm loss: {11 - i / 1000:.6E} | loss scale: 4096.0 |", 2000),
    "rounds": lambda: lines(lambda i: f"[{i}]\tvalid_0's auc: 0.{i % 1000:03d}\ttraining's l2: {i * 0.3:.3f}", 2000),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_runs_read_in_bulk_read_as_line_by_line(name, monkeypatch):
    data = LOGS[name]()
    for piece in (1 << 20, 9000, 65536 + 17):
        slow, slow_state = reading(data, False, monkeypatch, piece)
        fast, fast_state = reading(data, True, monkeypatch, piece)
        assert slow, "the log has values"
        assert difference(fast, slow) is None, piece
        assert fast_state == slow_state, piece
    by_name: dict[str, list] = {}
    for point in slow:
        by_name.setdefault(point[0], []).append(point[1:4])
    assert batches(data, monkeypatch) == by_name


def random_log(seed: int) -> bytes:
    """Runs of a few shapes, each of random length, with numbers of random forms."""
    rng = random.Random(seed)
    shapes = list(LOGS.values())
    made = []
    for _ in range(30):
        block = rng.choice(shapes)().split(b"\n")
        start = rng.randrange(len(block))
        made.append(b"\n".join(block[start : start + rng.choice((1, 3, 5, 40, 400))]) + b"\n")
    return b"".join(made)


@pytest.mark.parametrize("seed", range(12))
def test_mixed_runs_read_in_bulk_read_as_line_by_line(seed, monkeypatch):
    data = random_log(seed)
    slow, slow_state = reading(data, False, monkeypatch)
    fast, fast_state = reading(data, True, monkeypatch)
    assert difference(fast, slow) is None
    assert fast_state == slow_state
    # and cut anywhere, with a hand-over through the metrics cache, one series still
    monkeypatch.setattr(metrics, "BULK_BYTES", 8192)
    pieces = [comparable(point) for point in points_read_in_pieces(data, seed, largest=40000)]
    assert difference(pieces, [point[:4] for point in slow]) is None


def test_a_long_run_is_read_in_bulk(monkeypatch):
    """The bulk path is taken (not just harmless): a reader that may not read line by line past a
    run's first lines still gives every value."""
    data = LOGS["steps crossing digit widths"]()
    calls = []
    read = MetricReader._read

    def counted(self, chunk, first, end):
        calls.append(end - first)
        return read(self, chunk, first, end)

    monkeypatch.setattr(MetricReader, "_read", counted)
    points, _ = reading(data, True, monkeypatch)
    assert len(points) == 2 * 3000
    assert sum(calls) < len(data) / 50, "most lines were read in bulk"


@pytest.mark.parametrize("seed", range(6))
def test_a_series_takes_a_batch_as_it_takes_its_values_one_by_one(seed):
    """MetricSeries.add_many keeps the windows (and so the drawn points) `add` keeps, through the
    stride doubling and with ties, gaps and a series too full to take a newcomer."""
    from jupyter_trainer.metrics.series import MetricSeries

    rng = random.Random(seed)
    one_by_one, in_batches = MetricSeries(max_points=rng.choice((4, 10, 64)), max_names=3), None
    in_batches = MetricSeries(max_points=one_by_one.max_points, max_names=3)
    x = 0.0
    for _ in range(60):
        name = rng.choice(("loss", "acc", "lr", "val_loss", "grad_norm"))
        count = rng.choice((1, 2, 7, 50, 900))
        xs, values = [], []
        for _ in range(count):
            x += 1
            xs.append(x if rng.random() > 0.01 else float("nan"))
            values.append(rng.choice((0.5, 0.25, rng.random(), float("inf") if rng.random() < 0.01 else 1.0)))
        for point in zip(xs, values):
            one_by_one.add((name, "step", *point))
        in_batches.add_many(name, "step", xs, values)
        assert in_batches.windows == one_by_one.windows
        assert in_batches.stride == one_by_one.stride
        assert list(in_batches.updated) == list(one_by_one.updated)
    assert in_batches.points == one_by_one.points
