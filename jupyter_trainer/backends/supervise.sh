# jupyter_trainer's job supervisor (POSIX sh, run as: sh supervise.sh RUN_DIR GRACE STOP_CONTAINER CMD...).
#
# Starts CMD (the interpreter and the script's path; the script itself never
# passes through this shell) under nohup in its own session and process group,
# with stdout and stderr appended to RUN_DIR/output.log, then waits for it and
# writes its exit code to RUN_DIR/exit_code, with "stopped" when it stopped the
# job and "exited" when the job ended on its own. SIGTERM or SIGINT to this
# supervisor stops the job's whole process group: TERM first, KILL after GRACE
# seconds. The files are created beforehand by the submitter and only written
# into here, so they keep their owner and mode even when a container's root
# writes them; pid and exit_code are pre-filled with spaces and overwritten in
# place, so recording them needs no new disk space even when the log filled it.
# With --notify, what notify.py needs (the URL, what names the job, the check it
# signs its result with) comes on stdin, and notify.py is read, before the job
# starts: the job never sees the URL nor replaces the code that gets it.
# STOP_CONTAINER: 0, or 1 to stop the container with TERM to its PID 1, or 2 with USR1 (a keeper's
# container, see docker/keeper.sh, whose restart policy leaves it stopped then).
# A container's keeper that starts the job again says which start of it this is in
# JUPYTER_TRAINER_RESTARTS, and when the first was in JUPYTER_TRAINER_FIRST_STARTED_AT (for
# --notify); the job inherits neither.
run_dir=$1
grace=$2
stop_container=$3
shift 3
restarts=${JUPYTER_TRAINER_RESTARTS:-0}
case $restarts in '' | *[!0-9]*) restarts=0 ;; esac
# ...and when its first start was (seconds), which --notify tells as the job's start
first_started_at=${JUPYTER_TRAINER_FIRST_STARTED_AT:-}
case $first_started_at in '' | *[!0-9.]* | *.*.* | .*) first_started_at= ;; esac
unset JUPYTER_TRAINER_RESTARTS JUPYTER_TRAINER_FIRST_STARTED_AT

notify_url= notify_job= notify_check= notifier=
IFS= read -r notify_url || :
IFS= read -r notify_job || :
IFS= read -r notify_check || :
[ -z "$notify_url" ] || notifier=$(cat "$run_dir/notify.py")

# The files written once the job runs, or read after it has ended, are opened now, before the job
# can replace them (with a FIFO that would block or swallow what is written, a link to elsewhere;
# in a container, replacing its name for a store's file would leave the store's copy unwritten);
# the job does not inherit them.
exec >>"$run_dir/output.log" 2>&1 </dev/null 5>>"$run_dir/clock" 8<>"$run_dir/pid" 9<>"$run_dir/exit_code"
if [ -n "$notifier" ]; then
    exec 6<>"$run_dir/notified" 7<"$run_dir/output.log"
fi
trap '' HUP
# seconds, to the nanosecond where date can
now() {
    t=$(date +%s.%N 2>/dev/null)
    case $t in *N* | '') date +%s ;; *) printf '%s\n' "$t" ;; esac
}
started_at=${first_started_at:-$(now)}

child=
killer=
stopping=
how=exited
stop_job() {
    stopping=1
    [ -n "$child" ] || return 0
    # "stopped" only when the signal reached the job: one that had ended on its own keeps its outcome
    if kill -TERM -"$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null; then
        how=stopped
    fi
    (sleep "$grace"; kill -KILL -"$child" 2>/dev/null) &
    killer=$!
}
trap stop_job TERM INT

if command -v nohup >/dev/null 2>&1; then
    set -- nohup "$@"
fi
# a background command of a non-interactive shell starts with INT and QUIT ignored, and no
# shell can undo that in its children; env (coreutils 8.31+) gives them back their defaults
if env --default-signal=INT,QUIT true 2>/dev/null; then
    set -- env --default-signal=INT,QUIT "$@"
fi
if command -v setsid >/dev/null 2>&1; then
    setsid "$@" 5>&- 6>&- 7<&- 8<&- 9<&- &
else
    "$@" 5>&- 6>&- 7<&- 8<&- 9<&- &
fi
child=$!
printf '%s %s\n' "$$" "$child" >&8
[ -z "$stopping" ] || stop_job

# The log's size now and then ("SECONDS BYTES"), so that a value printed with no step or epoch
# can be placed in time (a plain log holds no times).
# The sampler is a process of its own, not a copy of this shell: nothing may take it for a
# supervisor (in a container, a job's supervisor is found by its command line).
log_size() { stat -L -c %s "/proc/$$/fd/1" 2>/dev/null; }  # the log this supervisor appends to, whatever its name now
# Its sleep is waited for, so that the TERM ending it ends its sleep too: no `sleep 15` outlives a job.
sh -c '
    trap "kill \$nap 2>/dev/null; exit 0" TERM
    while kill -0 "$1" 2>/dev/null; do
        t=$(date +%s.%N 2>/dev/null)
        case $t in *N* | "") t=$(date +%s) ;; esac
        printf "%s %s\n" "$t" "$(stat -L -c %s "/proc/$2/fd/1" 2>/dev/null)" >&5
        sleep 15 & nap=$!
        wait $nap
    done' jupyter-trainer-clock "$child" "$$" 8<&- 9<&- &
sampler=$!

# wait returns early when a trapped signal arrives; wait again until the job is gone
while :; do
    wait "$child"
    code=$?
    kill -0 "$child" 2>/dev/null || break
done
if [ -n "$stopping" ] && [ "$code" -gt 128 ]; then
    # the job may have ended just as the signal interrupted wait: bash still has its real status
    wait "$child" 2>/dev/null
    again=$?
    [ "$again" = 127 ] || code=$again
fi
if [ -n "$stopping" ]; then
    # members of the job's group can outlive its leader: the timer's KILL must still reach them
    while kill -0 -"$child" 2>/dev/null; do sleep 1; done
fi
[ -z "$killer" ] || { kill "$killer" 2>/dev/null; wait "$killer" 2>/dev/null; }
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
# the last sample, then "end": this supervisor has ended (while Slurm cannot be asked, what tells
# its exit code from one the job wrote, see slurm/states.py)
printf '%s %s\nend\n' "$(now)" "$(log_size)" >&5
printf '%s %s\n' "$code" "$how" >&9
exec 8<&- 9<&-

# The notifier runs on its own, after this supervisor is gone: the job's outcome counts once its
# supervisor has ended, and must not wait for a slow receiver. It stops the container, when
# asked to, once it has told (this supervisor would stop it from under it).
if [ -n "$notify_url" ] && [ -n "$notifier" ]; then
    if command -v python3 >/dev/null 2>&1; then
        # its files are opened here, while this supervisor holds the run: once the job is seen
        # ended, a container's names for them may go (the files stay the store's)
        # isolated (-I -S) and from /: nothing of the job's (a json.py in its directory, a .pth
        # file) is imported into it
        set -- python3 -I -S -c "$notifier" "$code" "$how" "$started_at" "$stop_container" "$restarts"
        ! command -v setsid >/dev/null 2>&1 || set -- setsid "$@"
        printf '%s\n%s\n%s\n' "$notify_url" "$notify_job" "$notify_check" \
            | (cd / && exec "$@" 3<&6 4<&7 6<&- 7<&- >/dev/null 2>&1) &
        stop_container=0
    else
        printf '{"delivered": false, "detail": "no python3 here to send the notification", "attempts": 0}' >&6
    fi
fi

# Stop the container (its init forwards the signal to the keep-alive process) unless
# another jupyter_trainer job still runs in it, from any store: every run's files
# are under a .../jupyter_trainer/jobs/ directory in a container.
if [ "$stop_container" = 1 ] || [ "$stop_container" = 2 ]; then
    for cmdline in /proc/[0-9]*/cmdline; do
        [ "$cmdline" = "/proc/$$/cmdline" ] && continue
        if grep -q -F "/jupyter_trainer/jobs/" "$cmdline" 2>/dev/null; then
            exit 0
        fi
    done
    if [ "$stop_container" = 2 ]; then kill -USR1 1; else kill -TERM 1; fi
fi
