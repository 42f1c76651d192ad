"""Everything Slurm: sbatch, squeue, sacct and scancel, one squeue per poll for every job.

    declared.py  its options, their typed values (SlurmOptions) and its run files, read at %load_ext
    spec.py      the options' checks, and the options as sbatch takes them
    commands.py  Slurm's commands, run as argument lists; their failures become our errors here
    queue.py     what squeue (and accounting) say, shared by every job of a poll
    states.py    Slurm's state and the supervisor's files, as one Observation
    backend.py   SlurmBackend: submit, observe, stop
    array.py     a sweep as one job array: held, its runs made, released; array.sh its tasks' script
    batch.sh, start.py, node.py   copied into each run: the batch script, the supervisor's start,
                 and the per-node start of a many-node job

Importing the package imports nothing else: the registry reads `declared.py` when the extension
loads, and makes the backend (backend.py) on first use.
"""
