#!/bin/sh
# jupyter_trainer's Slurm batch script, the same for every job: sbatch RUN_DIR/slurm_batch.sh RUN_DIR TOKEN NODES REQUEUE GRACE CMD...
# Nothing of the job's is written in it; its arguments are passed as they are to slurm_start.py,
# which runs the job's supervisor (supervise.sh) as the host backend does. TOKEN, new for each
# submission, is only there for squeue to show in the job's command (which nobody can change): it
# tells this job from an earlier run's of the same name and log.
run_dir=$1
shift 2
exec python3 -I -S "$run_dir/slurm_start.py" "$run_dir" "$@"
