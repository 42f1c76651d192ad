#!/usr/bin/env bash
# One real detached training job, end to end: install, submit from an IPython
# kernel that then exits, follow the job from the jupyter-trainer CLI, show its
# final status. Runs in a Docker container when an engine answers (image:
# $JUPYTER_TRAINER_IMAGE, default python:3.11-slim), else on this machine (--host).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

echo "== installing jupyter_trainer into .venv"
python3 -m venv .venv
.venv/bin/python -m pip install -q -e . >/dev/null
export PATH="$repo/.venv/bin:$PATH"

image=${JUPYTER_TRAINER_IMAGE:-python:3.11-slim}
placement="--host"
if docker info >/dev/null 2>&1; then
    if docker image inspect "$image" >/dev/null 2>&1 || docker pull -q "$image" >/dev/null 2>&1; then
        placement="--image $image"
    else
        echo "== the Docker engine answers but image $image is not available: training on this machine"
    fi
else
    echo "== no Docker engine reachable: training on this machine (--host)"
fi

workdir=${JUPYTER_TRAINER_DEMO_DIR:-$repo/demo_run}
mkdir -p "$workdir"
name="demo-$(date +%Y%m%d-%H%M%S)"
echo "== submitting job $name ($placement) from an IPython kernel, which then exits"
ipython --no-banner --quick -c "
ip = get_ipython()
ip.run_line_magic('load_ext', 'jupyter_trainer')
ip.run_cell_magic('train_detached', '$placement --name $name --workdir $workdir --no-widget', open('example_notebooks/linear_regression.py').read())
"
echo "== the kernel is gone; following the job from the CLI"
jupyter-trainer logs "$name" --follow
echo "== final status"
jupyter-trainer status "$name"
echo "== the model it wrote: $(cat "$workdir/model.json")"
jupyter-trainer status "$name" --json | python3 -c 'import json, sys; sys.exit(json.load(sys.stdin)["status"] != "completed")'
