#!/usr/bin/env bash
# One real detached training job, end to end: install, submit from an IPython kernel that then
# exits, follow the job from the jupyter-trainer CLI, show its final status, and remove the
# container and the job record it created (the model it wrote stays in demo_run/).
# It trains in a Docker container when an engine answers and has an image to run (image:
# $JUPYTER_TRAINER_IMAGE, else python:3.11-slim, else the test image .ci/run builds); otherwise on
# this machine (--host), saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
setup_work=$repo/.ci/work
source .ci/setup.sh  # log, with_progress, apt_install, ensure_python, venv_install

ensure_python
venv_install .venv .
export PATH="$repo/.venv/bin:$PATH"

# -- where to train: a container if we can, else this machine, and why ----------------
image_available() {
    docker image inspect "$1" >/dev/null 2>&1 && return 0
    [ "$1" = "jupyter-trainer-test:bookworm-pip" ] && return 1  # built locally, never pulled
    pull_error=$(docker pull -q "$1" 2>&1 >/dev/null | tail -1) && return 0
    return 1
}

# one name for this run's job and container: two demos started in the same second never share them
stamp="$(date +%Y%m%d-%H%M%S)-$$"
placement=(--host)
container=
if ! command -v docker >/dev/null 2>&1; then
    log "docker is not installed: training on this machine (--host). Install Docker (Debian: apt-get install docker.io) to train in a container."
elif ! engine_error=$(docker info 2>&1); then
    # the line that says why: docker 20.10 (Debian bookworm's) prints it on stdout among the client's
    # own details and only "errors pretty printing info" on stderr, newer clients print it on stderr
    reason=$(printf '%s\n' "$engine_error" | grep -iE 'cannot connect|error during connect|permission denied|no such|not found' | head -1 || true)
    [ -n "$reason" ] || reason=$(printf '%s\n' "$engine_error" | grep -iE 'error' | grep -v 'errors pretty printing info' | head -1 || true)
    [ -n "$reason" ] || reason=$(printf '%s\n' "$engine_error" | grep -v '^[[:space:]]*$' | tail -1 || true)
    reason=$(printf '%s' "$reason" | sed 's/^[[:space:]]*//; s/^ERROR: //' | cut -c1-120)
    log "no Docker engine answers (${reason:-docker info failed}): training on this machine (--host). Start one, or set DOCKER_HOST, to train in a container."
else
    pull_error=
    if [ -n "${JUPYTER_TRAINER_IMAGE:-}" ]; then
        candidates=("$JUPYTER_TRAINER_IMAGE")
    else
        candidates=(python:3.11-slim jupyter-trainer-test:bookworm-pip)
    fi
    for candidate in "${candidates[@]}"; do
        if image_available "$candidate"; then
            container="jt-demo-$stamp"
            placement=(--image "$candidate" --container "$container")
            break
        fi
    done
    if [ -z "$container" ]; then
        log "the Docker engine answers but has no image ${candidates[*]} and cannot pull one (${pull_error:-no registry reachable}): training on this machine (--host). Set JUPYTER_TRAINER_IMAGE to an image the engine has (bash .ci/run builds jupyter-trainer-test:bookworm-pip without a registry)."
    fi
fi

workdir=${JUPYTER_TRAINER_DEMO_DIR:-$repo/demo_run}
mkdir -p "$workdir"
name="demo-$stamp"

clean_up() {
    log "removing what the demo created: job $name${container:+ and container $container} (kept: $workdir/model.json)"
    jupyter-trainer stop "$name" >/dev/null 2>&1 || true
    jupyter-trainer rm "$name" >/dev/null 2>&1 || true
    [ -z "$container" ] || docker rm -f "$container" >/dev/null 2>&1 || true
}
trap clean_up EXIT

log "submitting job $name (${placement[*]}) from an IPython kernel, which then exits"
JT_DEMO_LINE="${placement[*]} --name $name --workdir $workdir --no-widget" ipython --no-banner --quick -c "
import os
ip = get_ipython()
ip.run_line_magic('load_ext', 'jupyter_trainer')
ip.run_cell_magic('train_detached', os.environ['JT_DEMO_LINE'], open('example_notebooks/linear_regression.py').read())
"
log "the kernel is gone; following the job from the CLI"
jupyter-trainer logs "$name" --follow
log "final status"
jupyter-trainer status "$name"
log "the model it wrote: $(cat "$workdir/model.json")"
jupyter-trainer status "$name" --json | python3 -c 'import json, sys; sys.exit(json.load(sys.stdin)["status"] != "completed")'
