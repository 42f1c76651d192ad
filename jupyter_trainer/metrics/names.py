"""The vocabulary of metric names: which printed words name a metric, the series they belong to
(`Val Loss` is `val_loss`), twins (`loss`, `val_loss`), the axes a value is read at, and the metric
a one-line view shows."""

from __future__ import annotations

import re

# The words a metric's name is made of: a base, maybe a split before it and a reduction after it.
BASES = (
    "loss", "acc", "accuracy", "f1", "f1_score", "precision", "recall", "auc", "roc_auc", "lr",
    "learning_rate", "grad_norm", "perplexity", "ppl", "mae", "mse", "rmse", "r2", "iou", "miou",
    "map", "bleu", "rouge", "wer", "cer", "dice", "top1", "top5", "top_1", "top_5", "top1_acc", "top5_acc",
    "reward", "score", "logloss", "mlogloss", "binary_logloss", "multi_logloss",
)  # fmt: skip
SPLIT_ONLY = frozenset({"error", "merror"})  # a metric only with a split before it: "train-error", not "Error: 404"
# a one-word name ending or starting so is a metric too: total_loss, kl_loss, loss_cls, mean_reward
GENERIC_ENDS = ("_loss", "_acc", "_accuracy", "_reward", "_return")
NOT_METRICS = frozenset({"loss_scale", "loss_scaler"})  # mixed precision's scale: a setting
SPLITS = ("train", "training", "val", "valid", "validation", "eval", "test", "dev")
REDUCTIONS = ("step", "epoch", "avg", "mean", "macro", "micro", "weighted")  # scikit-learn's f1_macro, recall_weighted
EPOCH, STEP, TIME, NTH = "epoch", "step", "time", "n"
VALUE, BAR, RICH_BAR, EPOCH_HEADING, STEP_HEADING = "value", "bar", "rich bar", "epoch heading", "step heading"
TABLE_ROW, TABLE_EDGE, COLUMNS = "table row", "table edge", "columns"
STEP_WORDS = ("step", "global_step", "iteration", "iter", "it")
AXIS_TITLES = {EPOCH: "epoch", STEP: "step", TIME: "seconds since start", NTH: "value number"}


_SPACES = re.compile(r"[\s\-]+")


# A point is (name, axis, x, y): axis "step", "epoch", "time" (seconds since the start) or "n"
# (the value's number in its series).
Point = tuple


def metric_name(words: str, generic: bool | None = None) -> str | None:
    """The series a printed name belongs to, or None if it is not a metric's: `Val Loss` and
    `val-loss` are `val_loss`; `train/loss` keeps its slash. A one-word name (`generic`, by
    default when there is no blank in it) may also be any `..._loss` or `loss_...`: not so
    "Average loss", whose metric is the loss."""
    if generic is None:
        generic = " " not in words.strip()
    name = _SPACES.sub("_", words.strip().lower())
    if name in NOT_METRICS:
        return None
    if _is_metric(name) or (
        generic and (name.endswith(GENERIC_ENDS) or name.startswith("loss_")) and name[0].isalpha()
    ):
        return name
    if "@" in name:  # "Acc@1", "recall@10", "mAP@0.5": at a cut-off
        base, _, cut = name.partition("@")
        return name if cut.replace(".", "", 1).isdigit() and _is_metric(base) else None
    if generic and "/" in name and _MAP_WORDS & set(name.rpartition("/")[2].split("_")):  # "coco/bbox_mAP_50"
        return name if name[0].isalpha() else None
    if generic and "." in name.strip("."):  # a head's own: mmseg's "decode.loss_ce" and "aux.loss_ce" are two
        return name if metric_name(name.rpartition(".")[2], generic=True) and name[0].isalpha() else None
    return None


def _is_metric(name: str) -> bool:
    rest = _without_split(name)
    if rest in _BASE_SET or (rest in SPLIT_ONLY and rest != name):
        return True
    base, _, reduction = rest.rpartition("_")
    return reduction in REDUCTIONS and base in _BASE_SET


_BASE_SET = frozenset(BASES)
_MAP_WORDS = frozenset({"map", "ap", "ar"})  # detection's scores, as evaluators tag them


def twin_key(name: str) -> str:
    """What a metric's chart is named by: `loss`, `train_loss`, `val_loss` and `eval_loss` share one."""
    rest = _without_split(name)
    base, _, reduction = rest.rpartition("_")
    return base if reduction in REDUCTIONS and base else rest


def _without_split(name: str) -> str:
    """`val_loss` without its split: `loss` (and `valid_1_auc`, `validation_0_logloss`: the
    numbered evaluation sets of LightGBM and XGBoost)."""
    split = _SPLIT_PREFIX.match(name)
    return name[split.end() :] if split and split.end() < len(name) else name


_SPLIT_PREFIX = re.compile("(?:" + "|".join(sorted(SPLITS, key=len, reverse=True)) + r")(?:_\d+)?[_/]")


def main_metric(names) -> str | None:
    """The metric a one-line view shows: `loss` if there is one, else the first training loss
    (`train_loss`), else any loss, else the first name."""
    names = list(names)
    for wanted in (
        lambda n: n == "loss",
        lambda n: n in ("train_loss", "training_loss"),
        lambda n: "loss" in n and not n.startswith(("val", "eval", "test")),
    ):
        found = next((name for name in names if wanted(name)), None)
        if found:
            return found
    return next((name for name in names if "loss" in name), names[0] if names else None)
