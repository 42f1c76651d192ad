#!/bin/sh
# jupyter_trainer's Slurm batch script, the same for every job: sbatch RUN_DIR/slurm_batch.sh RUN_DIR NODES REQUEUE GRACE CMD...
# Nothing of the job's is written in it; its arguments are passed as they are to slurm_start.py,
# which runs the job's supervisor (supervise.sh) as the host backend does.
exec python3 -I -S "$1/slurm_start.py" "$@"
