"""What the bytes of a log line say, for the metric reader: the patterns of values, names, bars,
tables and settings, and the small readers of a line's parts (the name before a separator, whether
a value sits inside a call or among settings, where a line starts)."""

from __future__ import annotations

import bisect
import re

from ..logs.reading import ANSI_ESCAPE_BYTES
from .names import EPOCH, EPOCH_HEADING, SPLITS, STEP, STEP_HEADING, STEP_WORDS, VALUE, _without_split, metric_name

# what a terminal does not show, cut out before reading: escapes, and runs of NULs
_UNSEEN = re.compile(ANSI_ESCAPE_BYTES.pattern + rb"|\x00+")
_NUMBER = rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|[-+]?inf"
# a separator and the value after it; the name before it is read backwards (see _NAME_BEFORE)
_VALUE_AFTER = re.compile(
    rb"[:=][ \t]*(?:['\"]|\[(?=[-+.\d][^,\]\r\n]{0,32}\]))?(" + _NUMBER + rb")(?:/(\d+))?(?![\w.])"
)
# a name, reversed: read from just before a separator towards the start of the line
# (each word starts with a letter: "step 123 loss" is "loss", and the same name is the same key)
# (a word before the last may be a possessive: LightGBM's "training's auc", "valid_1's auc")
_NAME_BEFORE = re.compile(rb"[ \t]*['\"]?([a-z0-9_/.@-]{0,63}[a-z](?: (?:s')?[a-z0-9_/-]{0,63}[a-z]){0,2})")
# a value with no separator before it, as a loop's print may say it: "loss 0.25", "lr 0.1 ppl 12";
# the name before the blanks is read backwards, and must be a metric's (from the run's first blank
# only, and possessive: endless blanks cost one pass)
_BARE_VALUE = re.compile(rb"(?<![ \t])[ \t]++(" + _NUMBER + rb")(?![\w.:/%])")
# a report's fields between pipes, as PyTorch's examples, fairseq and Megatron print them: the
# words before the value are its name ("| valid loss  5.50 |" is valid_loss, "| lm loss: 1.1E+01 |"
# lm_loss); found from the pipes, which the regex engine finds fast
_PIPE_FIELD = re.compile(
    rb"\|[ \t]*+([a-z][a-z0-9_/-]{0,63}+(?:[ \t]++[a-z][a-z0-9_/-]{0,63}+){0,3})[ \t]*+[:=]?[ \t]*+['\"]?("
    + _NUMBER
    + rb")['\"]?[ \t]*+(?=\||\r|\n|\Z)"
)
# a field that says which split a report line is on: "| valid on 'valid' subset |"
_SPLIT_FIELD = re.compile(rb"\|[ \t]*(test|testing|val|valid|validation|eval|evaluation|dev)\b[^|0-9\r\n]*\|")
_BLANKS = re.compile(r"[ \t]+")
# a line that is an assignment, as a printed config file has it ("learning_rate = 1e-3 # ..."): a
# setting, not a value training reached
_ASSIGNMENT = re.compile(
    rb"[ \t]*(?:[a-z]+:[ \t]+)?[a-z_][a-z0-9_.]*[ \t]+=[ \t]+[^ \t\r\n#]+[ \t]*(?:#[^\r\n]*)?(?:[\r\n]|\Z)"
)
# markers without a separator: "Epoch 3/10", "Epoch [1/10]", "epoch 3", "Step 5", "step [100/600]"
# ("| epoch 3 |" counts from 1, as "Epoch 3/10" does: its batches come before its end)
_HEADINGS = tuple(
    (
        kind,
        re.compile(
            word + rb"(?<![a-z0-9_]" + word + rb")[ \t]*\[?[ \t]*(\d+)(?:[ \t]*/[ \t]*(\d+))?(?![\w.])([ \t]*\|)?"
        ),
    )
    for kind, word in (
        (EPOCH_HEADING, b"epoch"),
        (STEP_HEADING, b"step"),
        (STEP_HEADING, b"iter"),
        (STEP_HEADING, b"iteration"),
    )
)
# MMEngine's loggers (MMDetection, MMSegmentation, MMPretrain): "Epoch(train)  [1][  50/1833]" is
# epoch 1 (counted from 1) and 50 of its 1833 iterations, "Iter(train) [  50/80000]" iteration 50;
# "(val)" and "(test)" say the line's split
_MM_EPOCH = re.compile(rb"epoch\((?:train|val|test)\)[ \t]*\[(\d+)\]\[[ \t]*(\d+)/(\d+)\]")
_MM_ITER = re.compile(rb"iter\((?:train|val|test)\)[ \t]*\[[ \t]*(\d+)/(\d+)\]")
_MM_SPLIT = re.compile(rb"(?:epoch|iter)\((val|test)\)")
# a printed config: "    LOSS_WEIGHT: 1.0" (detectron2's YAML) on a line of its own, or a value inside
# "dict(...)" (MMEngine's Python config)
_YAML_SETTING = re.compile(rb"[ \t]*[A-Z][A-Z0-9_]*:[ \t]*[^ \t\r\n]+[ \t]*(?:[\r\n]|\Z)")
# a key-value table, as stable-baselines3 prints one per rollout: "| rollout/    |      |" starts a
# section, "|    ep_rew_mean | -1.2e+03 |" is its rollout/ep_rew_mean, a line of dashes ends the table
# (and its time/total_timesteps is the step of all its values)
_TABLE_ROW = re.compile(
    rb"^\|[ \t]+([a-z_][a-z0-9_./-]{0,127})[ \t]*\|[ \t]*(?:(" + _NUMBER + rb")[ \t]*)?\|[ \t]*$", re.M
)
_TABLE_EDGE = re.compile(rb"^-{8,}[ \t]*$", re.M)
TABLE_STEPS = ("total_timesteps", "timesteps", "global_step", "step")
# an epochs loop's own tqdm bar, "Epochs:  33%|###3      | 1/3 [...]": 1 epoch done (the bars
# nested in it, each its batches, move through the next)
_EPOCH_BAR = re.compile(rb"(?<![a-z])epochs?:[ \t]*\d{1,3}%\|[^|\r\n]{0,200}\|[ \t]*(\d+)/(\d+)")
# timm's training lines: "Train: 3 [ 100/1251 (  8%)]" is epoch 3 (counted from 0) and its bar
_TIMM_EPOCH = re.compile(rb"(?<![a-z])train: (\d+) \[")
# a line that starts with "[N]" is at step N, as XGBoost and LightGBM print their rounds
_ROUND = re.compile(rb"\[(\d+)(?:/\d+)?\][ \t]")  # and scikit-learn's "[3/100]"
_ULTRALYTICS_BAR = re.compile(rb"/(\d+) (?:[\d.]+[kmg]?[a-z]*/s)? \d+(?:\.\d+s|:\d\d)")
# a progress bar's "n/total": tqdm's "| 45/100 [", Keras's " 45/100 [===" and Keras 3's "45/100 ━━"
# (pattern, what n must follow (one of them; none: anything), whether an "Epoch E/T" on the bar's own line
# counts from 0)
_BARS = (
    (re.compile(rb"/(\d+)(?: ?\[| ?\xe2\x94\x81)"), (), False),
    # PyTorch's examples' "[640/60000 (1%)]", timm's "[ 100/1251 (  8%)]"
    (re.compile(rb"/(\d+)[ \t]*\([ \t]*\d+%\)\]"), (b"[",), False),
    # a report's counter: "|   200/ 2983 batches |", "20/100 iterations"
    (re.compile(rb"/[ \t]*(\d+)[ \t]+(?:batches|batch|iterations|iters|steps)\b"), (), False),
    # Rich's bar, as Lightning draws it: "Epoch 1/1 ━━━━ 4/4 0:00:00 • ..." (its epoch counts from 0)
    (re.compile(rb"/(\d+) \d+:\d\d:\d\d"), (b"\xe2\x94\x81 ",), True),
    # ultralytics' own bar: "100% ━━━━━━━━──── 8/12 3.2it/s 2.5s<1.2s" (its bar ends in "━" or "─",
    # then n/total, the rate if known, the time so far)
    (_ULTRALYTICS_BAR, (b"\xe2\x94\x81 ", b"\xe2\x94\x80 "), False),
)
_DIGITS_BEFORE = re.compile(rb"\d+(?![a-z0-9])")  # reversed: the digits, and no word before them
# a line that starts with one of these reports on that split: "Test set: Average loss: 0.03" is test_loss
_EVALUATION_LINE = re.compile(rb"[ \t]*(test|testing|val|valid|validation|eval|evaluation|dev)\b")


def _name_of(words: str) -> tuple[str | None, str | None]:
    """(a marker's kind, or None; a metric's name, or None) for the words before a separator.
    The name is the longest run of the last words that is a known one: in "Test set: Average
    loss" only "loss" is; in "Test loss" and "val_loss" the split belongs to it."""
    words = words.replace("'s ", " ")  # "training's auc": the training set's
    parts = words.split(" ")
    for start in range(len(parts)):
        candidate = "_".join(parts[start:])
        if candidate in ("epoch", "train_epoch"):
            return EPOCH, None
        if candidate in STEP_WORDS:
            return STEP, None
        name = metric_name(candidate, generic=start == len(parts) - 1)
        if name is not None:
            return VALUE, name
    return None, None


_SPLIT_WORDS = frozenset(split.encode()[::-1] for split in SPLITS)  # reversed, as _NAME_BEFORE reads them
# reversed: what is before a split's own value inside a metric's parentheses, from the split back to
# the metric's name, as scikit-learn's search prints scores: "score=(train=0.950, test=0.930)"
_PARENTHESIS_BEFORE = re.compile(rb"[ \t]*(?:,[^(),\r\n]{0,64}){0,3}\([ \t]*[=:][ \t]*")


def _split_of_a_metric(reversed_low: bytes, at: int, split: str) -> tuple[str | None, str | None]:
    """A split's value inside a metric's parentheses: "score=(train=0.95, test=0.93)" gives
    train_score and test_score; anything else named by a split alone is no metric."""
    inside = _PARENTHESIS_BEFORE.match(reversed_low, at)
    if inside is not None:
        outer = _NAME_BEFORE.match(reversed_low, inside.end())
        if outer is not None:
            kind, name = _name_of(outer.group(1)[::-1].decode("ascii"))
            if kind == VALUE and _without_split(name) == name:
                return VALUE, metric_name(f"{split}_{name}")
    return None, None


def _follows(low: bytes, position: int, openings: tuple[bytes, ...]) -> bool:
    """Whether the bytes just before `position` are one of `openings`."""
    return any(low[position - len(opening) : position] == opening for opening in openings)


def _without_unseen(data: bytes) -> tuple[bytes, list[tuple[int, int]]]:
    """`data` without what a terminal does not show, terminal escapes and NULs, and where they were:
    (position in what is left, bytes removed up to there), so that a position can be found in the
    log again. A run of NULs (a sparse file's hole, read) leaves a line end in its place: it ends
    the line it is on, as a hole that is passed over unread does (MetricReader.skip_hole), and
    costs nothing to look through."""
    parts, shifts, kept, removed = [], [], 0, 0
    for match in _UNSEEN.finditer(data):
        begin, finish = match.span()
        parts.append(data[kept:begin])
        at = begin - removed  # where it was, in what is left
        if data[begin] == 0:
            parts.append(b"\n")
            at += 1
            removed -= 1
        removed += finish - begin
        shifts.append((at, removed))
        kept = finish
    parts.append(data[kept:])
    return b"".join(parts), shifts


def _shifted(position: int, shifts: list[tuple[int, int]]) -> int:
    """A position in the log's bytes as it is in them without escapes and NULs (one inside what
    was cut out: where what follows it is)."""
    removed = 0
    for at, total in shifts:
        if at + total > position:
            return min(position - removed, at)
        removed = total
    return position - removed


def _unshifted(position: int, shifts: list[tuple[int, int]] | None) -> int:
    """A position in the bytes without escapes as it is in the log's."""
    if not shifts:
        return position
    index = bisect.bisect_right(shifts, (position, float("inf"))) - 1
    return position + (shifts[index][1] if index >= 0 else 0)


SETTING_BYTES = 4096  # a config line is shorter: one whose start is further back is no setting


def _is_setting(pattern, data: bytes, position: int) -> bool:
    """Whether the line `position` is on is a printed setting (`pattern` matches it from its start)."""
    floor = max(0, position - SETTING_BYTES)
    start = max(data.rfind(b"\n", floor, position), data.rfind(b"\r", floor, position)) + 1
    return (start > 0 or floor == 0) and pattern.match(data, start) is not None


MAX_CALLS_LOOKED_AT = 8  # of a line's opened parentheses before a value (a line of endless ones costs no more)


def _line_start(low: bytes, position: int) -> int:
    floor = max(0, position - SETTING_BYTES)
    return max(low.rfind(b"\n", floor, position), low.rfind(b"\r", floor, position)) + 1 or floor


def _inside_call(low: bytes, position: int) -> bool:
    """Whether `position` lies inside an unclosed call of its line, "dict(", "AdamW(",
    "Namespace(": a printed config's keyword arguments, not values training reached."""
    line_start = _line_start(low, position)
    opened = position
    for _ in range(MAX_CALLS_LOOKED_AT):
        opened = low.rfind(b"(", line_start, opened)
        if opened <= line_start:
            return False
        if (low[opened - 1 : opened].isalnum() or low[opened - 1 : opened] == b"_") and low.count(
            b"(", opened, position
        ) > low.count(b")", opened, position):
            return True
    return False


_WORD_VALUE = re.compile(rb"[a-z_]=['\"]?[a-z/]")
WORD_SETTINGS = 3  # values that are words on a line of "name=value" pairs that make it a list of settings


def _among_word_settings(low: bytes, position: int, seen: dict[int, bool]) -> bool:
    """Whether `position` is on a line that prints settings as "name=value" pairs, several of
    them words ("task=detect, mode=train, ..., iou=0.7", as YOLO prints its arguments)."""
    start = _line_start(low, position)
    if start == position - SETTING_BYTES:
        return False  # a line longer than a printed config's: none (and no look along it for each value)
    known = seen.get(start)
    if known is None:
        found = _LINE_END.search(low, position, position + SETTING_BYTES)
        end = found.start() if found else min(len(low), position + SETTING_BYTES)
        known = seen[start] = len(_WORD_VALUE.findall(low, start, end)) >= WORD_SETTINGS
    return known


def line_split(low: bytes, start: int, end: int) -> str:
    """The split a line reports on ("val", "test", ...; "" for none): "Test set: ...", a pipe
    field "| valid on 'valid' subset |", MMEngine's "Epoch(val)"."""
    found = _EVALUATION_LINE.match(low, start)
    if found is None and low.find(b"|", start, end) >= 0:
        found = _SPLIT_FIELD.search(low, start, end)
    if found is None and low.find(b")", start, end) >= 0:
        found = _MM_SPLIT.search(low, start, end)
    return _SPLIT_NAMES[found.group(1)] if found else ""


def _field_name(words: bytes) -> tuple[str | None, str | None]:
    """A pipe field's words as a name: all of them, when the last ones make a metric's name."""
    text = _BLANKS.sub(" ", words.decode("ascii").strip())
    kind, name = _name_of(text)
    if kind != VALUE:
        return kind, name
    whole = metric_name(text, generic=True) or text.replace(" ", "_")
    return VALUE, whole if whole.endswith(name) else name


_LINE_END = re.compile(rb"[\r\n]")


def _segment(data: bytes, position: int, length: int, floor: int = 0) -> tuple[int, int]:
    """Where the line or redraw that `position` is on starts and ends; it starts at `floor` or
    later. Each search goes no further than that line or redraw: a line of a million redraws
    costs one pass, not one per redraw."""
    start = max(data.rfind(b"\n", floor, position), data.rfind(b"\r", floor, position), floor - 1) + 1
    found = _LINE_END.search(data, position)  # the nearest end, whichever it is: never past it
    return start, found.start() if found else length


_SPLIT_NAMES = {
    b"test": "test",
    b"testing": "test",
    b"val": "val",
    b"valid": "val",
    b"validation": "val",
    b"eval": "eval",
    b"evaluation": "eval",
    b"dev": "dev",
}
