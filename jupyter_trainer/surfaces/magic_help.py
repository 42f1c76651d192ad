"""What `%%train_detached?` and the other magics' `?` show: a description, the options, examples.

IPython's own help formatter writes reStructuredText (a `::` line before the usage); these
help texts are read in a pager or a notebook, so they are plain text laid out as written.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class MagicHelp:
    description: str  # one paragraph
    examples: str  # two or three, as typed in a cell


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's layout with the description and examples kept as written, and no reST."""

    def __init__(self, prog, indent_increment=2, max_help_position=30, width=92):
        super().__init__(prog, indent_increment, max_help_position, width)


HELP = {
    "train_detached": MagicHelp(
        "Run the cell as a training script in the background, detached from this kernel: in a "
        "persistent Docker container (--image, --container) or as a process on this machine "
        "(--host). The cell returns at once; the job goes on when the notebook is closed, the kernel "
        "dies or the SSH session drops. Running the same cell again attaches to its job instead of "
        "training twice. The cell runs as a file of the working directory would (its modules import, "
        "its files open). %train_detached SCRIPT, with no cell, runs an existing script in place. "
        "Defaults come from %config TrainerMagics.OPTION; a flag always wins. Words after -- are the "
        "script's arguments.",
        """\
%%train_detached --image pytorch/pytorch:latest --gpus all --name resnet50
import torch
...

%train_detached main.py --image pytorch/pytorch:latest --gpus all -- --epochs 3

%%train_detached --host --name quick -- --epochs 3 --lr 0.01
import sys
print(sys.argv[1:])

%%train_detached --image my-image --env WANDB_API_KEY=$key --stop-container-when-done""",
    ),
    "sagemaker_fit": MagicHelp(
        "Run the cell as the entry script of an Amazon SageMaker training job: SageMaker starts the "
        "instances, runs the script as its framework containers do (the SM_* environment, "
        "hyperparameters as --key value arguments, the model written to SM_MODEL_DIR uploaded to "
        "S3) and stops the instances when it ends. The cell returns once the job is submitted. "
        "--instance-type local runs the same job on this machine's Docker engine. The standard AWS "
        "configuration chain gives the credentials; no option takes them. %sagemaker_fit with no "
        "script runs the image's own train; %sagemaker_fit SCRIPT makes an existing file the entry script.",
        """\
%%sagemaker_fit --framework pytorch --framework-version 2.1 --py-version py310 --instance-type ml.g5.xlarge \
--hyperparameter epochs=10
import os
...

%%sagemaker_fit --image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1 --input train=s3://bucket/data \
--spot --max-wait 7200

%%sagemaker_fit --image-uri my-image --instance-type local --name try-locally

%sagemaker_fit --image-uri my-byoc-image --input training=s3://bucket/data --hyperparameter epochs=10""",
    ),
    "train_jobs": MagicHelp(
        "Every job of this user, whichever kernel or terminal started it: its status, backend and "
        "where it runs, when it started, how long it ran, its exit code and its latest main metric. "
        "In a notebook it is a live table (filter by status; attach, show the log or stop a job "
        "from its row); in a terminal, or with --no-widget, a text table.",
        """\
%train_jobs
%train_jobs --all
%train_jobs --no-widget""",
    ),
    "train_attach": MagicHelp(
        "Show an existing job's view (log, status, metrics) in this notebook, from any kernel: "
        "after a kernel restart, in another notebook, or a job started from a terminal.",
        """\
%train_attach resnet50""",
    ),
    "train_logs": MagicHelp(
        "Print a job's log, progress-bar redraws collapsed to their last state. --follow keeps "
        "printing new lines until the job ends; interrupting the kernel ends following, not the job.",
        """\
%train_logs resnet50 -n 50
%train_logs resnet50 --follow""",
    ),
    "train_stop": MagicHelp(
        "Stop a job: TERM to its whole process group, KILL after a grace period (or the SageMaker "
        "job stopped), and wait briefly until it has ended. --container also stops the job's "
        "container, releasing its GPUs.",
        """\
%train_stop resnet50
%train_stop resnet50 --container""",
    ),
    "train_rm": MagicHelp(
        "Remove a finished job's runs: their records, logs and files in the job store. A job that "
        "is still running is refused and nothing is removed. `jupyter-trainer prune --older-than 7d` "
        "removes old runs of every job.",
        """\
%train_rm resnet50
%train_rm resnet50 --run 2""",
    ),
    "train_compare": MagicHelp(
        "Compare jobs on one metric: one chart with each job's series in its own colour, and a "
        "table of each job's status, last value, best value (the lowest for loss-like names, the "
        "highest for accuracy-like ones) and how many values it has, kept live while any of them "
        "runs. The metric is --metric, else the first loss-like one the jobs share. x is the "
        "metric's own axis (step, epoch) when every job gives it so, else the seconds since each "
        "job's start (always with --x time). In a terminal, or with --no-widget, a text table; "
        "jupyter-trainer compare gives the same, and --json.",
        """\
%train_compare lr-0.1 lr-0.01 lr-0.001
%train_compare resnet50 vit-b16 --metric val_acc
%train_compare run-a run-b --x time --no-widget""",
    ),
}


def describe(parser: argparse.ArgumentParser, magic: str, prog: str) -> str:
    """Give `parser` the magic's description, examples and plain layout; return its help text."""
    about = HELP[magic]
    parser.prog = prog
    parser.formatter_class = HelpFormatter
    parser.description = "\n".join(textwrap.wrap(about.description, 92))
    parser.epilog = "examples:\n" + textwrap.indent(about.examples, "  ")
    return parser.format_help()
