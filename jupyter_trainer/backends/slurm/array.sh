#!/bin/sh
# jupyter_trainer's batch script for a sweep's job array, the same for every sweep:
#   sbatch --array=... ARRAY_DIR/slurm_array.sh ARRAY_DIR TOKEN NODES REQUEUE GRACE
# Task T finds its run through ARRAY_DIR/T (the link its run's launch made) and starts it as
# slurm_batch.sh starts a lone job; the run's command is in the run (slurm_command). TOKEN is only
# there for squeue to show in every task's command (see queue.py).
array_dir=$1
shift 2
run_dir=$(cd "$array_dir/$SLURM_ARRAY_TASK_ID" 2>/dev/null && pwd -P) || {
    echo "jupyter_trainer: task $SLURM_ARRAY_TASK_ID of this job array has no run (the sweep's submission did not finish)" >&2
    exit 70
}
exec python3 -I -S "$run_dir/slurm_start.py" "$run_dir" "$@"
