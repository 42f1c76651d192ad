"""One series whatever the reading: the points a log gives are the same whether it is read whole
or in pieces cut anywhere (inside a redraw, between a \\r and its bar, inside a UTF-8 character,
inside a line of megabytes), and whether one reader reads it all or hands over to another through
the metrics cache (a new kernel catching up). Real libraries' logs are checked the same way in
test_real_outputs (check_any_reading); here, the formats of our own emitters and the extremes."""

from __future__ import annotations

import json
import random

import pytest

from jupyter_trainer.metrics.reader import WINDOW, MetricReader


def points_of(data: bytes) -> list[tuple]:
    points: list[tuple] = []
    reader = MetricReader(points.append)
    reader.feed(data)
    reader.flush()
    return points


def points_read_in_pieces(data: bytes, seed: int, largest: int = 9000) -> list[tuple]:
    """Read in random pieces; halfway, the reader's state goes through JSON (as the metrics cache
    keeps it) to a new reader, which reads on from where the first says to."""
    rng = random.Random(seed)
    points: list[tuple] = []
    reader = MetricReader(points.append)
    handover = rng.randrange(len(data) + 1)
    at = 0
    while at < handover:
        size = rng.choice((1, 2, 3, rng.randint(1, 200), rng.randint(1, largest)))
        reader.feed(data[at : min(at + size, handover)])
        at = min(at + size, handover)
    state = json.loads(json.dumps(reader.state()))
    resume = reader.resume_at
    reader = MetricReader(points.append)
    reader.restore(state)
    reader.position = resume
    at = resume
    while at < len(data):
        size = rng.choice((1, rng.randint(1, 200), rng.randint(1, largest), 1 << 20))
        reader.feed(data[at : at + size])
        at += size
    reader.flush()
    return points


def difference(read: list[tuple], whole: list[tuple]) -> str | None:
    """Where two readings' points first differ (None: nowhere), in a line a failure can show."""
    if read == whole:
        return None
    at = next((index for index, (a, b) in enumerate(zip(read, whole)) if a != b), min(len(read), len(whole)))
    return f"{len(read)} points, one read gives {len(whole)}; first difference at {at}: {read[at:at + 2]} against {whole[at:at + 2]}"


def word_language_model(epochs=3, batches=114, every=20) -> bytes:
    """PyTorch's word_language_model example's report lines."""
    lines = []
    for epoch in range(1, epochs + 1):
        for batch in range(every, batches, every):
            loss = 7.6 - epoch * 0.5 - batch / 1000
            lines.append(f"| epoch {epoch:3d} | {batch:5d}/{batches:5d} batches | lr 20.00 | ms/batch 40.{batch % 10:02d} | loss {loss:5.2f} | ppl {2.718 ** loss:8.2f}")
        lines.append("-" * 89)
        lines.append(f"| end of epoch {epoch:3d} | time: 12.{epoch}s | valid loss {6 - epoch * 0.4:5.2f} | valid ppl {2.718 ** (6 - epoch * 0.4):8.2f}")
        lines.append("-" * 89)
    lines.append(f"| End of training | test loss {4.9:5.2f} | test ppl {134.3:8.2f}")
    return ("\n".join(lines) + "\n").encode()


def megatron(iterations=30) -> bytes:
    return "".join(
        f" iteration {i:8d}/{iterations:8d} | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): 310.{i} | "
        f"learning rate: {1.5e-4 * i / iterations:.3E} | global batch size: 8 | lm loss: {11 - i / 10:.6E} | loss scale: 4096.0 |\n"
        for i in range(1, iterations + 1)
    ).encode()


def million_redraws(count=1_000_000) -> bytes:
    """One line of a million redraws, as a bar that never ends its line draws it (with a 3-byte
    block character in each, which a read may cut)."""
    return b"".join(b"\r%3d%%|\xe2\x96\x88   | %d/%d [00:01<00:02, loss=%d]" % (n * 100 // count, n, count, n % 997) for n in range(count)) + b"\n"


def stable_baselines3(iterations=40) -> bytes:
    """A PPO run's key-value tables as stable-baselines3's logger prints them: sections, keys
    indented by three blanks, cells padded, a line of dashes above and below; the first rollout's
    table has no train/ section yet."""
    tables = []
    for it in range(1, iterations + 1):
        rows = [("rollout/", ""), ("ep_len_mean", 200 + it), ("ep_rew_mean", f"{-1234.5 + it * 100:.3g}"), ("time/", ""),
                ("fps", 1234 - it), ("iterations", it), ("time_elapsed", it * 5), ("total_timesteps", it * 2048)]  # fmt: skip
        if it > 1:
            rows += [("train/", ""), ("approx_kl", f"{0.0053892597 / it:.8g}"), ("entropy_loss", -1.37), ("learning_rate", 0.0003),
                     ("loss", f"{-0.00677 * it:.3g}"), ("n_updates", it * 10), ("value_loss", f"{0.0021 * it:.3g}")]  # fmt: skip
        keys = [(key if key.endswith("/") else "   " + key, str(value)) for key, value in rows]
        key_width, value_width = max(len(key) for key, _ in keys), max(len(value) for _, value in keys)
        dashes = "-" * (key_width + value_width + 7)
        tables += [dashes, *(f"| {key:<{key_width}} | {value:<{value_width}} |" for key, value in keys), dashes]
    return ("\n".join(tables) + "\n").encode()


def gradient_boosting(iterations=300) -> bytes:
    """scikit-learn's GradientBoostingClassifier(verbose=1, subsample=0.8): a header, a row per iteration."""
    rows = [f"{'Iter':>10}{'Train Loss':>16}{'OOB Improve':>16}{'Remaining Time':>16} "]
    rows += [f"{i:>10}{1.3 / i:>16.4f}{0.01 / i:>16.4f}{f'{(iterations - i) * 0.01:.2f}s':>16}" for i in range(1, iterations + 1)]
    return ("\n".join(rows) + "\nDone\n").encode()


def yolo(epochs=3, batches=8, own_bar=False) -> bytes:
    """ultralytics' training: a header per epoch, then the epoch's bar, whose description is its row
    (`own_bar`: drawn by ultralytics' own TQDM, as its releases since 8.3 do, not by tqdm)."""
    out = []
    for epoch in range(1, epochs + 1):
        out.append(f"\n{'Epoch':>11}{'GPU_mem':>11}{'box_loss':>11}{'cls_loss':>11}{'dfl_loss':>11}{'Instances':>11}{'Size':>11}\n")
        for n in range(1, batches + 1):
            row = f"{f'{epoch}/{epochs}':>11}{'0G':>11}{1.5 - epoch * 0.1 - n / 100:>11.4g}{2.5 - n / 50:>11.4g}{1.2:>11.4g}{40 + n:>11}{640:>11}"
            if own_bar:  # its bar is 12 wide: "━" done, "─" to do, "╸" half way; then n/total, the rate, the time
                filled = n * 12 // batches
                bar = "━" * filled + "─" * (12 - filled)
                out.append(f"\r\x1b[K{row}: {n * 100 // batches:.0f}% {bar} {n}/{batches} 3.2it/s {n * 0.3:.1f}s" + (f"<{(batches - n) * 0.3:.1f}s" if n < batches else ""))
            else:
                out.append(f"\r{row}: {n * 100 // batches:3d}%|{'#' * n}{' ' * (batches - n)}| {n}/{batches} [00:0{n}<00:00,  3.2it/s]")
        header = " " * 17 + "Class     Images  Instances      Box(P          R      mAP50  mAP50-95)"
        if own_bar:  # the validation's bar too, over its 2 batches
            out.append(f"\n\r\x1b[K{header}: 50% ━━━━━━────── 1/2 5.1it/s 0.2s<0.2s\r\x1b[K{header}: 100% ━━━━━━━━━━━━ 2/2 5.1it/s 0.4s\n")
        else:
            out.append(f"\n{header}: 100%|##########| 1/1\n")
        out.append(" " * 19 + f"all          4         17      0.612      0.843      0.{epoch}31      0.611\n")
    return "".join(out).encode()


LOGS = {
    "word language model": word_language_model,
    "gradient boosting columns": gradient_boosting,
    "yolo columns": yolo,
    "yolo columns, ultralytics' own bar": lambda: yolo(own_bar=True),
    "stable-baselines3 tables": stable_baselines3,
    "megatron": megatron,
    "an endless line of values, never redrawn": lambda: b"start " + b"".join(b"step %d loss: 0.%d | " % (n, n) for n in range(120_000)) + b"\n",
    "escapes between names and values": lambda: b"".join(b"\x1b[1mstep\x1b[0m %d \x1b[32mloss\x1b[0m: %d.5\r" % (n, n) for n in range(3000)),
    "a value cut by the log's end": lambda: b"step 1 loss: 0.5\nstep 2 loss: 0.25",
    "unicode everywhere": lambda: "".join(f"époque {n} — précision_loss: 0.{n} ✓ loss: {n}.0\n" for n in range(2000)).encode(),
}


@pytest.mark.parametrize("name", LOGS)
def test_a_log_gives_one_series_however_it_is_read(name):
    data = LOGS[name]()
    whole = points_of(data)
    assert whole, "the log has values"
    for seed in range(8):
        assert difference(points_read_in_pieces(data, seed), whole) is None, f"seed {seed}"


def test_a_million_redraws_on_one_line_read_in_pieces_as_in_one_read():
    data = million_redraws()
    assert len(data) > 40 * WINDOW
    whole = points_of(data)
    assert len(whole) == 1_000_000  # every redraw's value, at its n
    assert difference(points_read_in_pieces(data, seed=1, largest=1 << 20), whole) is None
