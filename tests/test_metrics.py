"""Metrics found with no configuration, each at its step or epoch (metrics.py)."""

import json
import random

import pytest

from jupyter_trainer.backends.notify import exception_line
from jupyter_trainer.logs.reading import MetricParser
from jupyter_trainer.metrics.names import metric_name, twin_key
from jupyter_trainer.metrics.progress import progress_of
from jupyter_trainer.metrics.reader import MetricReader
from jupyter_trainer.spec.job_spec import Metric


def read(*chunks, metrics=()):
    points = []
    reader = MetricReader(points.append, MetricParser(metrics).finders())
    for chunk in chunks:
        reader.feed(chunk.encode() if isinstance(chunk, str) else chunk)
    reader.flush()
    return points


def series(points):
    found = {}
    for name, axis, x, value in points:
        found.setdefault(name, []).append((axis, round(x, 4), value))
    return found


@pytest.mark.parametrize(
    "line, expected",
    [
        ("Loss: 0.5\n", {"loss": 0.5}),
        ("loss=0.5\n", {"loss": 0.5}),
        # CleanRL's episodes, and the one-element array gymnasium's vector envs give
        ("global_step=52, episodic_return=13.0\n", {"episodic_return": 13.0}),
        ("global_step=52, episode_reward=[13.]\n", {"episode_reward": 13.0}),
        ("{'loss': 0.41, 'grad_norm': 3.2, 'learning_rate': 4.9e-05}\n", {"loss": 0.41, "grad_norm": 3.2, "learning_rate": 4.9e-05}),
        ("{'loss': '0.41', 'eval_loss': '0.5'}\n", {"loss": 0.41, "eval_loss": 0.5}),
        ('{"loss": 0.41, "accuracy": 0.9}\n', {"loss": 0.41, "accuracy": 0.9}),
        ("v_num=0, train_loss=0.41, val_loss=0.5]\n", {"train_loss": 0.41, "val_loss": 0.5}),
        (" - loss: 0.3745 - accuracy: 0.8916 - val_loss: 0.1186 - val_accuracy: 0.9661\n",
         {"loss": 0.3745, "accuracy": 0.8916, "val_loss": 0.1186, "val_accuracy": 0.9661}),
        ("test loss: 0.9\n", {"test_loss": 0.9}),
        ("epoch 1 | Val Loss = 1e-3, LR: 0.01, F1: 0.7, acc: 0.25\n", {"val_loss": 0.001, "lr": 0.01, "f1": 0.7, "acc": 0.25}),
        ("Validation: loss: 0.5, acc: 0.9\n", {"val_loss": 0.5, "val_acc": 0.9}),  # the line says which split
        ("epoch 2 loss 0.25\n", {"loss": 0.25}),  # no separator, as many loops print it
        ("train/loss=0.3 train_loss_step=0.2 val_acc_epoch: 0.8\n", {"train/loss": 0.3, "train_loss_step": 0.2, "val_acc_epoch": 0.8}),
        ("Test set: Average loss: 0.0496, Accuracy: 9838/10000 (98%)\n", {"test_loss": 0.0496, "test_accuracy": 0.9838}),
        ("\x1b[1mloss\x1b[0m: \x1b[32m0.25\x1b[0m\n", {"loss": 0.25}),
    ],
)  # fmt: skip
def test_common_forms_are_found_each_under_its_own_name(line, expected):
    assert {name: value for name, _, _, value in read(line)} == expected


@pytest.mark.parametrize(
    "line",
    [
        "loss_scale: 8 lossy=1 xloss: 3\n",  # other words that merely contain a metric's name
        "ETA: 3s 00:10<00:12 eta: 5\n",  # times are not metrics
        "epoch: 3 step=5 global_step: 7\n",  # where training is, not what it measures
        "lossless 0.5 loss: abc loss=\n",
        # printed settings: YOLO's arguments, an optimizer's repr, argparse's Namespace, nanoGPT's overrides
        "engine/trainer: task=detect, mode=train, model=yolov8n.pt, data=coco8.yaml, epochs=3, iou=0.7, lr0=0.01\n",
        "optimizer: AdamW(lr=0.000119, momentum=0.9) with parameter groups 57 weight(decay=0.0)\n",
        "Namespace(lr=0.01, epochs=10, batch_size=64)\n",
        "Overriding: learning_rate = 0.0006\n",
    ],
)
def test_what_is_not_a_metric_is_left_alone(line):
    assert read(line) == []


def test_names_and_their_twins():
    assert metric_name("Val Loss") == metric_name("val-loss") == "val_loss"
    assert metric_name("Average loss") is None and metric_name("loss_scale") is None
    assert [twin_key(name) for name in ("loss", "train_loss", "val_loss", "eval_loss", "test_loss", "train_loss_epoch")] == ["loss"] * 6
    assert twin_key("val_accuracy") == "accuracy" and twin_key("lr") == "lr"


KERAS = (
    "Epoch 1/2\n"
    " 1/3 [=========>....................] - ETA: 3s - loss: 0.9000 - accuracy: 0.5000\r"
    " 2/3 [===================>..........] - ETA: 1s - loss: 0.8000 - accuracy: 0.5500\r"
    " 3/3 [==============================] - 5s 10ms/step - loss: 0.7000 - accuracy: 0.6000 - val_loss: 0.8000 - val_accuracy: 0.5500\n"
    "Epoch 2/2\n"
    " 3/3 [==============================] - 5s 10ms/step - loss: 0.5000 - accuracy: 0.7000 - val_loss: 0.6000 - val_accuracy: 0.6500\n"
)


def test_keras_values_are_at_their_epoch_and_the_bar_inside_it():
    found = series(read(KERAS))
    assert found["loss"] == [("epoch", 0.3333, 0.9), ("epoch", 0.6667, 0.8), ("epoch", 1.0, 0.7), ("epoch", 2.0, 0.5)]
    assert found["val_loss"] == [("epoch", 1.0, 0.8), ("epoch", 2.0, 0.6)]


def test_keras_3_bars_with_their_own_characters():
    line = "Epoch 1/2\n\x1b[1m3/3\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m5s\x1b[0m 10ms/step - accuracy: 0.8916 - loss: 0.3745\n"
    assert series(read(line.encode()))["loss"] == [("epoch", 1.0, 0.3745)]


def test_hugging_face_epoch_comes_after_the_values_it_belongs_to():
    log = (
        "{'loss': 0.41, 'grad_norm': 3.2, 'learning_rate': 4.9e-05, 'epoch': 0.5}\n"
        "{'loss': '0.38', 'learning_rate': '4.8e-05', 'epoch': '1.0'}\n"
        "{'eval_loss': 0.3, 'eval_accuracy': 0.9, 'eval_runtime': 1.2, 'epoch': 1.0}\n"
        " 50%|█████     | 10/20 [00:05<00:05,  2.00it/s]\n"  # the Trainer's own bar counts steps, not epochs
        "{'loss': 0.2, 'epoch': 1.5}\n"
    )
    found = series(read(log))
    assert found["loss"] == [("epoch", 0.5, 0.41), ("epoch", 1.0, 0.38), ("epoch", 1.5, 0.2)]
    assert found["eval_loss"] == [("epoch", 1.0, 0.3)] and "eval_runtime" not in found


def test_lightning_epochs_count_from_zero_and_a_redraw_of_the_last_value_at_the_next_step_is_replaced():
    # as Lightning's bar draws a step: n moves on (with the postfix it has), then the postfix is set
    log = (
        "Epoch 0:   0%|          | 0/2 [00:00<?, ?it/s]\r"
        "Epoch 0:  50%|#####     | 1/2 [00:01<00:01,  1.0it/s, v_num=0]\r"
        "Epoch 0:  50%|#####     | 1/2 [00:01<00:01,  1.0it/s, v_num=0, train_loss=0.41]\r"
        "Epoch 0: 100%|##########| 2/2 [00:02<00:00,  1.0it/s, v_num=0, train_loss=0.41]\r"
        "Epoch 0: 100%|##########| 2/2 [00:02<00:00,  1.0it/s, v_num=0, train_loss=0.38, val_loss=0.5]\n"
        "Epoch 1: 100%|##########| 2/2 [00:02<00:00,  1.0it/s, v_num=0, train_loss=0.3, val_loss=0.4]\n"
    )
    points = read(log)
    found = series(points)
    assert found["train_loss"] == [("epoch", 0.5, 0.41), ("epoch", 1.0, 0.38), ("epoch", 2.0, 0.3)]
    assert found["val_loss"] == [("epoch", 1.0, 0.5), ("epoch", 2.0, 0.4)]


def test_values_drawn_while_a_bar_lags_behind_the_loop_are_each_kept_and_spread_to_its_next_n():
    # tqdm draws n at most every mininterval but the postfix at every set_postfix: the steps between
    # two drawn n show their values at the first; each is kept, and they are spread up to the next
    log = "".join(
        [" 0%|   | 0/8 [00:00<?, ?it/s]\r"]
        + [f" 0%|   | 0/8 [00:00<?, ?it/s, loss={value}]\r" * 2 for value in (0.9, 0.8, 0.7, 0.6)]
        + [" 50%|#  | 4/8 [00:01<00:01, 4it/s, loss=0.6]\r"]
        + [f" 50%|#  | 4/8 [00:01<00:01, 4it/s, loss={value}]\r" for value in (0.5, 0.4)]
        + [" 100%|## | 8/8 [00:02<00:00, 4it/s, loss=0.4]\n"]
    )
    assert series(read(log))["loss"] == [("step", 0.0, 0.9), ("step", 1.0, 0.8), ("step", 2.0, 0.7), ("step", 3.0, 0.6),
                                         ("step", 4.0, 0.5), ("step", 6.0, 0.4), ("step", 8.0, 0.4)]  # fmt: skip


def test_scikit_learn_rounds_of_a_total_are_steps():
    log = "[1/100] 1 tree, 31 leaves, max depth = 7, train loss: 0.79, val loss: 0.82, in 0.005s\n[2/100] 1 tree, 31 leaves, max depth = 8, train loss: 0.77, val loss: 0.80, in 0.004s\n"
    assert series(read(log)) == {"train_loss": [("step", 1.0, 0.79), ("step", 2.0, 0.77)], "val_loss": [("step", 1.0, 0.82), ("step", 2.0, 0.8)]}


def test_lines_of_their_own_at_one_step_are_each_a_value_where_they_were_printed():
    # several environments ending episodes at the same global step (CleanRL, SB3's Monitor): no
    # line is a redraw of another, so none replaces or repeats one, and none moves to another step
    log = (
        "global_step=100, episodic_return=18.0\nglobal_step=200, episodic_return=18.0\n"
        "global_step=200, episodic_return=14.0\nglobal_step=200, episodic_return=14.0\n"
        "global_step=300, episodic_return=11.0\n"
    )
    assert series(read(log))["episodic_return"] == [
        ("step", 100.0, 18.0), ("step", 200.0, 18.0), ("step", 200.0, 14.0), ("step", 200.0, 14.0), ("step", 300.0, 11.0),
    ]  # fmt: skip
    # the same values redrawn by a bar that lags behind the loop: repeats are one, the rest spread
    bar = "\r 50%|#####     | 5/10 [00:01<00:01, loss=0.5]\r 50%|#####     | 5/10 [00:01<00:01, loss=0.5]\r 50%|#####     | 5/10 [00:01<00:01, loss=0.4]\r 70%|#######   | 7/10 [00:01<00:01, loss=0.3]\n"
    assert series(read(bar))["loss"] == [("step", 5.0, 0.5), ("step", 6.0, 0.4), ("step", 7.0, 0.3)]


def test_steps_win_over_epochs_and_a_bare_bar_counts_steps():
    found = series(read("Epoch 1\nstep 10 loss: 0.5\nstep 20 loss: 0.4\n"))
    assert found["loss"] == [("step", 10.0, 0.5), ("step", 20.0, 0.4)]
    tqdm = " 10%|█         | 1/10 [00:00<00:01, loss=0.9]\r 20%|██        | 2/10 [00:00<00:01, loss=0.8]\n"
    assert series(read(tqdm))["loss"] == [("step", 1.0, 0.9), ("step", 2.0, 0.8)]
    pytorch_example = "Epoch [1/2], Step [100/600], Loss: 0.5\nEpoch [1/2], Step [600/600], Loss: 0.3\nEpoch [2/2], Step [300/600], Loss: 0.2\n"
    assert series(read(pytorch_example))["loss"] == [("epoch", 0.1667, 0.5), ("epoch", 1.0, 0.3), ("epoch", 1.5, 0.2)]


def test_pipe_separated_reports_keep_every_batch_of_an_epoch_and_each_split_apart():
    from test_one_series import megatron, word_language_model

    found = series(read(word_language_model(epochs=3, batches=114, every=20)))
    # every batch report, at its place within the epoch (which counts from 1, as "| epoch 1 |" does)
    assert [x for _, x, _ in found["loss"]] == [round(epoch - 1 + batch / 114, 4) for epoch in (1, 2, 3) for batch in range(20, 114, 20)]
    assert len(found["ppl"]) == len(found["lr"]) == 15 and found["lr"][0][2] == 20.0
    assert [(x, value) for _, x, value in found["valid_loss"]] == [(1.0, 5.6), (2.0, 5.2), (3.0, 4.8)]
    assert [x for _, x, _ in found["valid_ppl"]] == [1.0, 2.0, 3.0]
    assert [value for _, _, value in found["test_loss"]] == [4.9] and [value for _, _, value in found["test_ppl"]] == [134.3]
    assert not {"ms/batch", "time", "batches"} & set(found)
    found = series(read(megatron(iterations=5)))
    assert sorted(found) == ["learning_rate", "lm_loss"]  # "loss scale" is a setting
    assert found["lm_loss"] == [("step", float(i), 11 - i / 10) for i in range(1, 6)]
    # fairseq: a validation line says its split in a field; its values are not the training loss's
    fairseq = (
        "epoch 001 | loss 9.5 | ppl 724.1 | wps 5000 | num_updates 100\n"
        "epoch 001 | valid on 'valid' subset | loss 8.9 | ppl 477.2 | num_updates 100\n"
        "epoch 002 | loss 8.1 | ppl 274.4 | wps 5100 | num_updates 200\n"
    )
    found = series(read(fairseq))
    assert found["loss"] == [("epoch", 1.0, 9.5), ("epoch", 2.0, 8.1)]
    assert found["val_loss"] == [("epoch", 1.0, 8.9)] and found["val_ppl"] == [("epoch", 1.0, 477.2)]


def test_boosting_rounds_each_evaluation_set_its_own_series():
    # as LightGBM's and XGBoost's train() and scikit-learn APIs print their rounds
    lightgbm = (
        "[1]\ttraining's binary_logloss: 0.6\ttraining's auc: 0.99\tvalid_1's binary_logloss: 0.61\tvalid_1's auc: 0.98\n"
        "[2]\ttraining's binary_logloss: 0.5\ttraining's auc: 0.995\tvalid_1's binary_logloss: 0.55\tvalid_1's auc: 0.985\n"
    )
    found = series(read(lightgbm))
    assert sorted(found) == ["training_auc", "training_binary_logloss", "valid_1_auc", "valid_1_binary_logloss"]
    assert found["valid_1_auc"] == [("step", 1.0, 0.98), ("step", 2.0, 0.985)]
    xgboost = "[0]\ttrain-logloss:0.60173\ttrain-error:0.00867\tvalid-logloss:0.60385\tvalid-error:0.018\n[5]\ttrain-logloss:0.3\ttrain-error:0.005\tvalid-logloss:0.35\tvalid-error:0.01\n"
    found = series(read(xgboost))
    assert sorted(found) == ["train_error", "train_logloss", "valid_error", "valid_logloss"]
    assert found["valid_logloss"] == [("step", 0.0, 0.60385), ("step", 5.0, 0.35)]
    found = series(read("[0]\tvalidation_0-logloss:0.44708\tvalidation_1-logloss:0.45281\n[1]\tvalidation_0-logloss:0.4\tvalidation_1-logloss:0.41\n"))
    assert found["validation_1_logloss"] == [("step", 0.0, 0.45281), ("step", 1.0, 0.41)] and len(found) == 2
    assert twin_key("valid_1_auc") == twin_key("training_auc") == "auc"
    # an error with no split is not one
    assert read("Error: 404 not found\n[08/01 12:01:00] loss: 0.5\n") == [("loss", "n", 1.0, 0.5)]


def test_stable_baselines3_tables_each_row_a_series_at_the_tables_timesteps():
    from test_one_series import stable_baselines3

    found = series(read(stable_baselines3(iterations=3).decode()))
    # every row of a section is a series named as its TensorBoard tag; total_timesteps is the x
    assert sorted(found) == [
        "rollout/ep_len_mean", "rollout/ep_rew_mean", "time/fps", "time/iterations", "time/time_elapsed",
        "train/approx_kl", "train/entropy_loss", "train/learning_rate", "train/loss", "train/n_updates", "train/value_loss",
    ]  # fmt: skip
    assert found["rollout/ep_rew_mean"] == [("step", 2048.0, -1130.0), ("step", 4096.0, -1030.0), ("step", 6144.0, -934.0)]
    # the train/ section comes from the second rollout on: its values are at that table's step
    assert found["train/loss"] == [("step", 4096.0, -0.0135), ("step", 6144.0, -0.0203)]
    # a separator line with no table before it is no table's end, and a two-cell row outside one is still read
    assert read("-" * 40 + "\nstep 5 loss: 0.5\n" + "-" * 40 + "\n") == [("loss", "step", 5.0, 0.5)]


def test_timm_epochs_and_bars_and_scores_at_a_cut_off():
    # timm's train.py: "Train: E [ i/N ( p%)]" is epoch E (from 0) and i of its N batches; its
    # validate() lines say their split and print Acc@1 / Acc@5 with their running averages after them
    timm = (
        "Train: 0 [   0/1000 (  0%)]  Loss: 6.931 (6.93)  Time: 3.522s,  290.77/s  (3.522s,  290.77/s)  LR: 1.000e-06  Data: 2.389 (2.389)\n"
        "Train: 0 [ 500/1000 ( 50%)]  Loss: 6.5 (6.7)  Time: 0.5s,  290.77/s  (3.522s,  290.77/s)  LR: 1.000e-05  Data: 0.1 (0.2)\n"
        "Test: [  48/48]  Time: 0.2 (0.5)  Loss:  0.8 (0.75)  Acc@1: 80.0 (84.0)  Acc@5: 95.0 (96.0)\n"
        "Train: 1 [   0/1000 (  0%)]  Loss: 5.9 (5.9)  Time: 3.522s,  290.77/s  (3.522s,  290.77/s)  LR: 3.000e-05  Data: 2.389 (2.389)\n"
    )
    found = series(read(timm))
    assert found["loss"] == [("epoch", 0.0, 6.931), ("epoch", 0.5, 6.5), ("epoch", 1.0, 5.9)]
    assert found["test_acc@1"] == [("epoch", 0.5, 80.0)] and found["test_acc@5"] == [("epoch", 0.5, 95.0)]
    # MMDetection's COCO evaluation, and cut-offs that are no score's
    found = series(read("Epoch(val) [1][625/625]    coco/bbox_mAP: 0.3740  coco/bbox_mAP_50: 0.5810  data/train.csv: 3  user@host: 5\n"))
    assert sorted(found) == ["val_coco/bbox_map", "val_coco/bbox_map_50"]
    assert read("recall@10: 0.5 mAP@0.5: 0.25 acc@x: 1\n") == [("recall@10", "n", 1.0, 0.5), ("map@0.5", "n", 1.0, 0.25)]


def test_column_tables_each_column_a_series_at_its_rows_step_or_epoch():
    from test_one_series import gradient_boosting, yolo

    found = series(read(gradient_boosting(iterations=4).decode()))
    assert found == {"train_loss": [("step", float(i), round(1.3 / i, 4)) for i in range(1, 5)]}
    found = series(read(yolo(epochs=2, batches=4).decode()))
    assert sorted(found) == ["box_loss", "cls_loss", "dfl_loss", "map50", "map50-95", "precision", "recall"]
    # the bar under the header moves through the epoch its first cell says (1/2: the first of two)
    assert [x for _, x, _ in found["box_loss"]] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    # and so does ultralytics' own bar ("━━━━──── 2/4 3.2it/s 0.6s<0.6s"), as its releases draw it
    assert series(read(yolo(epochs=2, batches=4, own_bar=True).decode())) == found
    # the validation bar's description is its columns' header, the row under it at the epoch's end
    assert found["map50"] == [("epoch", 1.0, 0.131), ("epoch", 2.0, 0.231)]
    newer = "\r\x1b[K                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100% ━━━━─── 1/1 5.1it/s 0.2s\n"
    assert series(read(newer + "                   all          4         17      0.612      0.843      0.831      0.611\n"))["recall"] == [("step", 1.0, 0.843)]  # at its bar's n, as tqdm's would be
    # a line that is not a row ends the table: what follows is not read by its columns
    after = read("Iter  Train Loss  Remaining Time\n 1  0.5  1s\nnot a row\n 2  0.25  1s\n")
    assert after == [("train_loss", "step", 1.0, 0.5)]
    # a line of words with no metric among them is no header
    assert read("Loading  the data  from disk\n 1  2  3\n") == []


def test_mmengine_and_detectron2_loggers():
    mmdet = (
        "optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=0.0001)\n"  # the printed config
        "08/01 12:01:30 - mmengine - INFO - Epoch(train)  [1][  50/1833]  base_lr: 2.0000e-03 lr: 2.0000e-03  eta: 3:39:27  "
        "time: 0.6092  data_time: 0.0211  memory: 4513  grad_norm: 3.7344  loss: 2.4500  loss_cls: 1.4200  acc: 80.2900\n"
        "08/01 12:02:30 - mmengine - INFO - Epoch(train)  [1][ 100/1833]  lr: 2.0000e-03  loss: 2.3  loss_cls: 1.3  acc: 81.0\n"
        "08/01 12:31:30 - mmengine - INFO - Epoch(val) [1][625/625]    acc: 60.0\n"
    )
    found = series(read(mmdet))
    assert found["loss"] == [("epoch", round(50 / 1833, 4), 2.45), ("epoch", round(100 / 1833, 4), 2.3)]
    assert [value for _, _, value in found["lr"]] == [0.002, 0.002]  # not the config's 0.02
    assert found["val_acc"] == [("epoch", 1.0, 60.0)] and [value for _, _, value in found["acc"]] == [80.29, 81.0]
    assert not {"time", "eta", "memory", "data_time", "momentum"} & set(found)
    mmseg = "- Iter(train) [   50/80000]  lr: 9.9945e-03  loss: 2.1538  decode.loss_ce: 1.4937  aux.loss_ce: 0.6601\n"
    found = series(read(mmseg))
    assert found["decode.loss_ce"] == [("step", 50.0, 1.4937)] and found["aux.loss_ce"] == [("step", 50.0, 0.6601)]
    detectron2 = (
        "MODEL:\n  ROI_HEADS:\n    LOSS_WEIGHT: 1.0\n"  # its YAML config, printed at the start
        "[08/01 12:01:00] d2.utils.events INFO:  eta: 7:29:54  iter: 19  total_loss: 1.81  loss_cls: 0.8367  lr: 0.0004  max_mem: 2845M\n"
    )
    assert sorted(series(read(detectron2))) == ["loss_cls", "lr", "total_loss"]


def test_space_separated_reports_and_a_printed_config():
    # nanoGPT's: its config file printed first, then "iter N: loss L, time T, mfu M"
    log = (
        "learning_rate = 1e-3 # with baby networks can afford to go a bit higher\n"
        "max_iters = 5000\n"
        "step 0: train loss 10.9, val loss 10.8\n"
        "iter 0: loss 10.9123, time 4512.10ms, mfu -100.00%\n"
        "iter 10: loss 3.2213, time 45.12ms, mfu 1.23%\n"
        "epoch 1 step 20 loss 2.5 lr 0.001 ppl 12.2 acc 0.5\n"
    )
    found = series(read(log))
    assert sorted(found) == ["acc", "loss", "lr", "ppl", "train_loss", "val_loss"]
    assert found["loss"] == [("step", 0.0, 10.9123), ("step", 10.0, 3.2213), ("step", 20.0, 2.5)]
    assert found["val_loss"] == [("step", 0.0, 10.8)] and found["acc"] == [("step", 20.0, 0.5)]


def test_values_without_step_or_epoch_are_numbered():
    assert series(read("loss: 3\nloss: 2\nloss: 1\n"))["loss"] == [("n", 1.0, 3.0), ("n", 2.0, 2.0), ("n", 3.0, 1.0)]


def test_user_metrics_add_and_override():
    metrics = [Metric("loss", r"L=([\d.]+)"), Metric("tokens", r"tok/s ([\d.]+)")]
    found = series(read("step 1 L=0.5 loss: 9 tok/s 100\nstep 2 L=0.4 loss: 8 tok/s 120\n", metrics=metrics))
    assert found == {
        "loss": [("step", 1.0, 0.5), ("step", 2.0, 0.4)],  # the user's pattern, not the word "loss"
        "tokens": [("step", 1.0, 100.0), ("step", 2.0, 120.0)],
    }


def test_user_metric_in_text_with_other_characters_is_placed_at_its_bytes():
    log = "step 1 █████ Verlust·0.5\nstep 2 █ Verlust·0.4\n"
    found = series(read(log, metrics=[Metric("verlust", r"Verlust·([\d.]+)")]))
    assert found["verlust"] == [("step", 1.0, 0.5), ("step", 2.0, 0.4)]


def test_every_value_counted_once_however_whole_lines_are_chunked():
    rng = random.Random(7)
    lines = [
        random.choice([f"Epoch {e}/30\n", f"step {e * 10} loss: {e / 7:.4f} acc={e / 100}\n", f"{{'loss': {e}, 'epoch': {e / 3}}}\n", "noise: x\n"])
        for e in range(1, 3000)
    ]
    whole = "".join(lines)
    expected = read(whole)
    chunks, position = [], 0
    while position < len(lines):
        size = rng.randint(1, 50)
        chunks.append("".join(lines[position : position + size]))
        position += size
    assert len(expected) > 1000
    assert read(*chunks) == expected


def test_a_reader_carried_over_goes_on_where_it_stopped():
    first, second = [], []
    reader = MetricReader(first.append)
    reader.feed(KERAS[: KERAS.index("Epoch 2/2")].encode())
    state = json.loads(json.dumps(reader.state()))
    carried = MetricReader(second.append)
    carried.restore(state)
    carried.feed(KERAS[KERAS.index("Epoch 2/2") :].encode())
    carried.flush()
    assert series(first + second) == series(read(KERAS))


def test_markers_that_are_not_numbers_change_nothing():
    assert series(read("step 5\nepoch: nan loss: 1\n"))["loss"] == [("step", 5.0, 1.0)]


def test_a_hostile_log_costs_one_pass():
    import time

    line = b"loss" + b" " * 200_000 + b"\n" + (b"x" * 100_000 + b":1 ") * 20 + b"\n" + b"a: 1 " * 100_000 + b"\n"
    line += b"| a a a a a a a a" * 50_000 + b"\n" + b"|" + b" " * 200_000 + b"| loss " + b"\t " * 100_000 + b"\n"
    line += b"A: 1 " * 100_000 + b"\n" + b"x = 1 " * 100_000 + b"\n" + b"dict(a=1, " * 100_000 + b"\n"
    started = time.process_time()
    assert read(line) == []
    assert time.process_time() - started < 5  # a bound, not a speed target: quadratic would take minutes


def test_many_short_lines_read_at_once_cost_one_pass():
    import time

    data = b"loss: 1\n" * 200_000  # each line's end is looked for up to that end, not the buffer's
    started = time.process_time()
    assert len(read(data)) == 200_000
    assert time.process_time() - started < 60  # a bound, not a speed target: quadratic would take many minutes


def test_progress_and_eta_of_the_bar_being_drawn():
    assert progress_of("Epoch 0:  50%|#####     | 1/2 [00:01<00:12,  1.0it/s, train_loss=0.41]").__dict__ == {"percent": 50, "eta": "00:12"}
    assert progress_of(" 45/469 [=====>.......] - ETA: 3s - loss: 0.4123").__dict__ == {"percent": 9, "eta": "3s"}
    assert progress_of(" 10%|█         | 1/10 [00:00<?, ?it/s]").eta == ""
    assert progress_of("just a line 3/4") is None


def test_the_exception_a_script_ended_with():
    lines = [
        "Traceback (most recent call last):",
        '  File "/job/script.py", line 3, in <module>',
        "    batch['images']",
        "KeyError: 'images'",
        "done",
    ]
    assert exception_line(lines) == "KeyError: 'images'"
    assert exception_line(["ValueError: printed, not raised"]) == ""
    nested = lines[:4] + ["", "During handling of the above exception, another exception occurred:", ""] + lines[:2] + ["torch.cuda.OutOfMemoryError: CUDA out of memory"]
    assert exception_line(nested) == "torch.cuda.OutOfMemoryError: CUDA out of memory"


def test_a_bar_redrawn_from_zero_shows_the_last_runs_values_and_they_are_not_read_again():
    # Lightning resets its bar before relabelling it for the next epoch
    log = (
        "Epoch 0: 100%|##########| 4/4 [00:01<00:00, train_loss=0.31]\r"
        "Epoch 0:   0%|          | 0/4 [00:00<?, ?it/s, train_loss=0.31]\r"
        "Epoch 1:  25%|##5       | 1/4 [00:00<00:01, train_loss=0.15]\n"
    )
    assert series(read(log))["train_loss"] == [("epoch", 1.0, 0.31), ("epoch", 1.25, 0.15)]
    # a first bar at 0 with values already set is not a reset
    assert series(read(" 0%|          | 0/5 [00:00<?, ?it/s, loss=2.0]\r 20%|##        | 1/5 [00:00<00:01, loss=1.0]\n"))["loss"] == [
        ("step", 0.0, 2.0), ("step", 1.0, 1.0)
    ]


def test_richs_epoch_counts_from_zero_on_the_bars_own_line():
    log = "Epoch 1/1  ━━━━━━━━━━━━━━━━━━ 4/4 0:00:00 • 0:00:00 43.53it/s train_loss: 0.166\n"
    assert series(read(log))["train_loss"] == [("epoch", 2.0, 0.166)]


def test_another_loops_bar_inside_an_epoch_is_an_evaluation():
    log = KERAS + "\r1/1 ━━━━━━━━━━━━━━━━━━━━ 0s 3ms/step - accuracy: 0.3750 - loss: 0.7261\n"
    found = series(read(log.encode()))
    assert found["loss"][-1] == ("epoch", 2.0, 0.5)  # fit's, kept
    assert found["eval_loss"] == [("epoch", 2.0, 0.7261)] and found["eval_accuracy"] == [("epoch", 2.0, 0.375)]


def test_a_name_first_printed_with_no_step_moves_to_the_step_once_there_is_one():
    log = "Namespace(batch_size=64, lr=0.01, epochs=3)\nstep 1 loss: 3 lr: 0.01\nstep 2 loss: 2 lr: 0.005\n"
    found = series(read(log))
    assert found["lr"] == [("step", 1.0, 0.01), ("step", 2.0, 0.005)] and found["loss"][0] == ("step", 1.0, 3.0)


def test_the_words_before_a_value_are_remembered_by_name_not_by_the_numbers_around_them():
    reader = MetricReader(lambda point: None)
    reader.feed(b"".join(b"step %d loss: 0.5 acc %d.1: 0.7\n" % (i, i) for i in range(5000)))
    assert len(reader._names) < 10 and reader.counts["loss"] == 5000
    assert MetricReader(lambda point: None)._names == {}  # each reader its own: one log cannot slow another


def test_more_names_and_fewer_false_ones():
    line = "total_loss: 1 kl_loss=2 loss_cls: 3 mean_reward: 4 Top-1: 0.5 loss_scale: 65536 HTTP error: 404 Error: 2\n"
    assert {name: value for name, _, _, value in read(line)} == {
        "total_loss": 1.0, "kl_loss": 2.0, "loss_cls": 3.0, "mean_reward": 4.0, "top_1": 0.5,
    }  # fmt: skip


def test_richs_heading_with_two_digits_is_not_a_bar():
    log = "Epoch 11/11 ━━━━━━━━━━━━━━━━━━ 4/4 0:00:00 • 0:00:00 43.53it/s train_loss: 0.166\n"
    assert series(read(log))["train_loss"] == [("epoch", 12.0, 0.166)]


def test_progress_on_a_line_of_digits_costs_one_pass():
    import time

    started = time.process_time()
    for line in ("1" * 20_000, "1/" * 10_000, "5%|" * 10_000, "4" * 10_000 + "/" + "2" * 10_000):
        assert progress_of(line) is None
    assert time.process_time() - started < 0.5  # quadratic, it took seconds a line


def test_a_torchrun_failure_is_told_by_its_ranks_exception():
    """torchrun (ranks teed with --tee: `[default0]:`) ends with its own ChildFailedError, which
    says nothing; the rank's error is the reason (seen with nanoGPT's CUDA-only DDP on a CPU)."""
    log = [
        "[default0]:Traceback (most recent call last):",
        '[default0]:  File "/workspace/train.py", line 89, in <module>',
        "[default0]:    torch.cuda.set_device(device)",
        "[default0]:AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 33, in <module>',
        "    sys.exit(load_entry_point('torch==1.13.0a0', 'console_scripts', 'torchrun')())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    assert exception_line(log) == "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    assert exception_line(log[4:]) == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"  # alone, it is all there is


def test_a_syntax_error_and_a_long_exception_line():
    assert exception_line(['  File "/job/script.py", line 3', "    print(", "         ^", "SyntaxError: '(' was never closed"]) == (
        "SyntaxError: '(' was never closed"
    )
    assert len(exception_line(["Traceback (most recent call last):", "ValueError: " + "x" * 15_000])) == 300


def test_the_logs_clock_places_a_byte_between_the_samples_around_it():
    from jupyter_trainer.metrics.clock import LogClock

    clock = LogClock(started_at=1000.0)
    clock.add(b"1000 0\n1010 100\n10")
    clock.add(b"20 300\n1015 50\nnot a sample\n1e400 400\n")  # the last three: a job's forgeries, left out
    assert (clock.sizes, clock.times) == ([0, 100, 300], [1000.0, 1010.0, 1020.0])
    assert clock.seconds_at(0) == 0.0 and clock.seconds_at(49) == pytest.approx(4.9) and clock.seconds_at(200) == 15.0
    assert clock.seconds_at(500) == 20.0  # past the last sample, and nothing said of now
    clock.until(700, 1060.0)
    assert clock.seconds_at(500) == 40.0


def test_values_with_no_step_or_epoch_are_placed_in_time():
    from jupyter_trainer.metrics.clock import LogClock

    clock = LogClock(started_at=0.0)
    clock.add(b"0 0\n10 20\n20 40\n")
    points = []
    reader = MetricReader(points.append, clock=clock)
    reader.feed(b"loss: 3\nloss: 2\nloss: 1\nloss: 0\n", 0)  # 8 bytes a line, the value's ":" 4 bytes in
    reader.flush()
    assert [(axis, x, value) for _, axis, x, value in points] == [("time", 2.0, 3.0), ("time", 6.0, 2.0), ("time", 10.0, 1.0), ("time", 14.0, 0.0)]


def test_a_splits_values_inside_a_metrics_parentheses():
    # scikit-learn's searches with return_train_score: each split a series of the scorer's name
    log = (
        "[CV 1/3] END .........C=0.1;, score=(train=0.920, test=0.880) total time=   0.0s\n"
        "[CV 2/3] END C=0.1; accuracy: (train=0.9, test=0.8) f1_macro: (train=0.7, test=0.6) total time=   0.0s\n"
    )
    assert read(log) == [
        ("train_score", "n", 1.0, 0.92), ("test_score", "n", 1.0, 0.88),
        ("train_accuracy", "n", 1.0, 0.9), ("test_accuracy", "n", 1.0, 0.8),
        ("train_f1_macro", "n", 1.0, 0.7), ("test_f1_macro", "n", 1.0, 0.6),
    ]  # fmt: skip
    # a split named alone, or inside a call that is no metric's, is none
    assert read("train=0.5 test: 0.4 run(train=0.2) Namespace(val=0.1)\n") == []
