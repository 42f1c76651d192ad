#!/usr/bin/env bash
# The GPU line on the real thing: run once on a machine with NVIDIA GPUs (two or more, not in MIG
# mode) and jupyter_trainer installed.
#
#     bash benchmarks/gpu_check.sh
#
# It checks, with host jobs (--host) that print the GPUs they were given:
#   1. two jobs get different GPUs (half of the machine's each), and a third one waits;
#   2. the third starts once the first ends, on a GPU the first let go;
#   3. a process outside jupyter_trainer computing on a GPU keeps that GPU out of the pool: a job
#      asking for every GPU waits, saying which one is busy, and starts once that process ends.
#
# The foreign process is $GPU_HOG, started with CUDA_VISIBLE_DEVICES naming one GPU; by default a
# PyTorch one-liner (python3 with torch and CUDA). Any program that nvidia-smi lists as a compute
# process will do.
#
# It uses a store and a lines directory of its own (in a temporary directory), so it neither waits
# for the machine's other jupyter_trainer jobs nor gets in their way; it removes them at the end.
# Prints one line per step, and "gpu_check: passed" or "gpu_check: FAILED: ..." (exit 1).
set -euo pipefail

JT=${JT:-jupyter-trainer}
PYTHON=${PYTHON:-python3}
GPU_HOG=${GPU_HOG:-$PYTHON -c 'import time, torch; x = torch.ones(1 << 20, device="cuda"); time.sleep(3600)'}
WAIT=${GPU_CHECK_WAIT:-120}  # seconds for a job to start (an image, a cold python, a loaded machine)

say() { echo "gpu_check: $*"; }
fail() { echo "gpu_check: FAILED: $*" >&2; exit 1; }

command -v nvidia-smi > /dev/null || fail "no nvidia-smi on PATH: run this where the GPUs are"
command -v "$JT" > /dev/null || fail "no $JT on PATH: install jupyter_trainer first (pip install .)"
mapfile -t gpus < <(nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,mig.mode.current --format=csv,noheader,nounits \
  | awk -F', *' '$5 != "Enabled" { print $1 }')
(( ${#gpus[@]} >= 2 )) || fail "this check needs two GPUs or more not in MIG mode; nvidia-smi lists ${#gpus[@]}"
say "nvidia-smi lists ${#gpus[@]} GPUs: ${gpus[*]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
export JUPYTER_TRAINER_HOME="$work/store" JUPYTER_TRAINER_LINES_DIR="$work/lines"
unset JUPYTER_TRAINER_GPUS
hog=
cleanup() {
  [ -n "$hog" ] && kill "$hog" 2> /dev/null || true
  touch "$work"/go-gc-a "$work"/go-gc-b "$work"/go-gc-c "$work"/go-gc-d
  for job in gc-a gc-b gc-c gc-d; do
    "$JT" stop "$job" > /dev/null 2>&1 || true
    "$JT" rm "$job" > /dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# the job: says which GPUs it sees, then waits for the word go-NAME
cat > "$work/job.py" << 'EOF'
import os, sys, time
me = sys.argv[1]
with open("started-" + me + ".new", "w") as handle:
    handle.write(os.environ.get("CUDA_VISIBLE_DEVICES", "(none)"))
os.rename("started-" + me + ".new", "started-" + me)
while not os.path.exists("go-" + me):
    time.sleep(0.1)
EOF

submit() {  # NAME COUNT
  (cd "$work" && "$JT" submit job.py --host --gpus "$2" --name "$1" -- "$1" > /dev/null) || fail "could not submit $1"
}
field() {  # NAME KEY: one field of `status NAME --json`
  "$JT" status "$1" --json | "$PYTHON" -c 'import json, sys; value = json.load(sys.stdin).get(sys.argv[1]); print(value if value is not None else "")' "$2"
}
started_within() {  # NAME SECONDS: waits for the job's line started-NAME, prints how long it took
  local began=$SECONDS
  while [ ! -e "$work/started-$1" ]; do
    (( SECONDS - began < $2 )) || return 1
    [ "$(field "$1" status)" != "failed" ] || fail "$1 failed: $(field "$1" reason)"
    sleep 0.2
  done
  echo $(( SECONDS - began ))
}
seen() { cat "$work/started-$1"; }
ends() {  # NAME
  touch "$work/go-$1"
  local began=$SECONDS
  until [ "$(field "$1" status)" = completed ]; do
    (( SECONDS - began < WAIT )) || fail "$1 did not end within ${WAIT}s of its word"
    sleep 0.5
  done
}
disjoint() {  # LIST LIST (comma-separated): no index in both
  "$PYTHON" -c 'import sys; a, b = (set(s.split(",")) for s in sys.argv[1:]); sys.exit(bool(a & b))' "$1" "$2"
}

half=$(( ${#gpus[@]} / 2 ))
rest=$(( ${#gpus[@]} - half ))
submit gc-a "$half"
started_within gc-a "$WAIT" > /dev/null || fail "gc-a (--gpus $half) did not start within ${WAIT}s: $(field gc-a reason)"
submit gc-b "$rest"
started_within gc-b "$WAIT" > /dev/null || fail "gc-b (--gpus $rest) did not start within ${WAIT}s: $(field gc-b reason)"
a=$(seen gc-a) b=$(seen gc-b)
say "gc-a sees GPUs $a, gc-b sees GPUs $b"
disjoint "$a" "$b" || fail "gc-a and gc-b were given the same GPU ($a; $b)"
[ "$(tr ',' '\n' <<< "$a" | wc -l)" = "$half" ] && [ "$(tr ',' '\n' <<< "$b" | wc -l)" = "$rest" ] \
  || fail "a job sees another number of GPUs than it asked for ($a; $b)"

submit gc-c 1
sleep 3
[ ! -e "$work/started-gc-c" ] || fail "gc-c started with every GPU held (it sees $(seen gc-c))"
[ "$(field gc-c status)" = pending ] || fail "gc-c is $(field gc-c status), not pending"
say "gc-c waits: $(field gc-c reason)"

touch "$work/go-gc-a"
took=$(started_within gc-c "$WAIT") || fail "gc-c did not start within ${WAIT}s of gc-a's end"
c=$(seen gc-c)
disjoint "$c" "$b" || fail "gc-c was given gc-b's GPU ($c)"
disjoint "$c" "$a" && fail "gc-c was given GPU $c, which gc-a did not let go ($a)"
say "gc-a ended; gc-c started ${took}s later on GPU $c"
ends gc-a
ends gc-b
ends gc-c

target=${gpus[0]}
CUDA_VISIBLE_DEVICES=$target bash -c "exec $GPU_HOG" > "$work/hog.log" 2>&1 &
hog=$!
began=$SECONDS
until nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits | awk -F', *' '{ print $2 }' | grep -qx "$hog"; do
  kill -0 "$hog" 2> /dev/null || fail "the foreign process ended: $(tail -n 3 "$work/hog.log")"
  (( SECONDS - began < WAIT )) || fail "nvidia-smi never listed the foreign process ($GPU_HOG) as a compute process"
  sleep 0.5
done
say "a process outside jupyter_trainer computes on GPU $target (pid $hog)"
submit gc-d "${#gpus[@]}"
sleep 3
[ ! -e "$work/started-gc-d" ] || fail "gc-d started on every GPU though GPU $target is busy outside (it sees $(seen gc-d))"
reason=$(field gc-d reason)
grep -q "GPU $target busy outside" <<< "$reason" || fail "gc-d's reason does not name GPU $target busy: $reason"
say "gc-d (--gpus ${#gpus[@]}) waits: $reason"
kill "$hog"
wait "$hog" 2> /dev/null || true
hog=
took=$(started_within gc-d "$WAIT") || fail "gc-d did not start within ${WAIT}s of the foreign process's end"
say "the foreign process ended; gc-d started ${took}s later on GPUs $(seen gc-d)"
ends gc-d
say passed
