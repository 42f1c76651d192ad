# jupyter_trainer's keeper: the main process of each container jupyter_trainer creates, under the
# container's init (POSIX sh; put into the container and run as: sh /jupyter_trainer/keeper.sh JOBS_DIR...).
#
# It keeps the container alive, as `tail -f /dev/null` did, and each time the container starts it
# starts again, through their own supervisor, the jobs run with --restarts that were interrupted:
# a run under a JOBS_DIR whose `restart` file says how (the supervisor's command, the job's
# environment and working directory, the supervisor's --notify input), whose `exit_code` is still
# blank (a job that ended by itself, or was stopped, has one), whose `no_restart` is empty (else
# a stop was asked), and whose `pid` names a supervisor that no longer runs. Each start again is a
# line of the run's `restarts` file and a marked line of its log. A job whose restarts are used up
# is left alone, said once in both.
#
# The container's restart policy is on-failure: a TERM (the engine stopping, docker stop or
# restart) ends this keeper with 143, and the engine starts the container again when it starts;
# USR1 (--stop-container-when-done, `stop --container`) ends it with 0: the container stays stopped.
trap 'exit 0' USR1
trap 'exit 143' TERM INT

# The kernel's boot id now, and at this container's previous start: a new one means that the
# machine restarted in between (rather than the engine or the container alone).
# Kept in the container's own file system, which lasts as long as the container (not in a jobs
# directory, where every job of the container would see it).
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) || boot=
case $boot in *[!0-9a-f-]* | '') boot=unknown ;; esac
cause=container
boot_file=${JUPYTER_TRAINER_BOOT_ID_FILE:-/tmp/.jupyter_trainer-boot-id} # a test gives its own
previous=
[ -f "$boot_file" ] && [ ! -h "$boot_file" ] && IFS= read -r previous <"$boot_file"
if [ -n "$previous" ] && [ "$previous" != "$boot" ]; then
    cause=boot
fi
printf '%s\n' "$boot" >"$boot_file" 2>/dev/null

# What the `restart` file holds is escaped (printf %b's \0NNN): a value with any byte in it, a
# newline included, stays one line, and never passes through this shell as code.
unescape() {
    unescaped=$(printf '%bx' "$1")
    unescaped=${unescaped%x}
}

mark() { # $1: the run's directory; $2: the line, put on a line of its own in the job's log
    # (a last byte that is a newline is stripped by $(...): anything left is a line cut short)
    [ -z "$(tail -c 1 "$1/output.log" 2>/dev/null)" ] || printf '\n' >>"$1/output.log"
    printf '%s\n' "$2" >>"$1/output.log"
}

has_stat=
command -v stat >/dev/null 2>&1 && has_stat=1

# Whether the run's files that the supervisor writes and the keeper reads by name are still the
# store's, in a run's directory that is the store's (mounted): each has a second name there, the
# store's own. A job can rename or remove one and make a new one (rotate the log): what a
# supervisor started again wrote into that would never reach the store, nor a stop the keeper.
store_files() { # $1: the run's directory
    [ -n "$has_stat" ] || return 0 # cannot tell
    for name in output.log pid exit_code clock no_restart; do
        [ -f "$1/$name" ] && [ ! -h "$1/$name" ] || return 1
        links=$(stat -c %h "$1/$name" 2>/dev/null)
        case $links in '' | *[!0-9]* | 0 | 1) return 1 ;; esac
    done
}

start_again() ( # $1: a run's directory; $2: "mounted" for the store's
    dir=$1
    [ -f "$dir/restart" ] && [ -s "$dir/restart" ] || return 0
    [ -s "$dir/no_restart" ] && return 0
    code=
    [ -f "$dir/exit_code" ] && IFS= read -r code <"$dir/exit_code"
    case $code in *[0-9]*) return 0 ;; esac
    # Only a job that a supervisor had started (or a keeper, "0 0"), and none runs now: a job being
    # launched this moment (its container was just created or started for it) has no pids yet, or
    # its supervisor runs.
    supervisor= job=
    [ -f "$dir/pid" ] && read -r supervisor job <"$dir/pid"
    case $supervisor in '' | *[!0-9]*) return 0 ;; esac
    # (read by tr, whose own command line never names the run, as grep's would: pids begin anew
    # with each start of the container, and the one recorded may be any process's now)
    args=$(tr '\000' '\n' <"/proc/$supervisor/cmdline" 2>/dev/null)
    case $args in *"
$dir/supervise.sh
$dir
"*) return 0 ;; esac
    [ "$2" != mounted ] || store_files "$dir" || return 0
    used=0 given_up=
    if [ -f "$dir/restarts" ]; then
        while read -r kind rest; do
            case $kind in restart) used=$((used + 1)) ;; used-up) given_up=1 ;; esac
        done <"$dir/restarts"
    fi
    allowed=0 cwd=/ input= has_input=
    set --
    while IFS= read -r line; do
        kind=${line%% *} rest=${line#* }
        case $kind in
        restarts) case $rest in '' | *[!0-9]*) return 0 ;; *) allowed=$rest ;; esac ;;
        cwd) unescape "$rest"; cwd=$unescaped ;;
        env)
            key=${rest%% *}
            case $key in '' | [!A-Za-z_]* | *[!A-Za-z0-9_]*) continue ;; esac
            unescape "${rest#* }"
            export "$key=$unescaped"
            ;;
        stdin) unescape "$rest"; input=$unescaped has_input=1 ;;
        arg) unescape "$rest"; set -- "$@" "$unescaped" ;;
        esac
    done <"$dir/restart"
    [ $# -gt 0 ] || return 0
    when=$(date -u '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null)
    case $cause in
    boot) why="the machine restarted (a new boot id)" ;;
    *) why="its container restarted" ;;
    esac
    if [ "$used" -ge "$allowed" ]; then
        [ -n "$given_up" ] && return 0
        printf 'used-up %s %s %s\n' "$boot" "$(date +%s)" "$cause" >>"$dir/restarts"
        mark "$dir" "----- jupyter_trainer: interrupted when $why, at $when; not started again: its $allowed restart(s) are used up -----"
        return 0
    fi
    n=$((used + 1))
    printf 'restart %s %s %s %s\n' "$n" "$boot" "$(date +%s)" "$cause" >>"$dir/restarts"
    mark "$dir" "----- jupyter_trainer: started again after $why (restart $n of $allowed) at $when -----"
    # Pids no process has, over the old ones, until the new supervisor writes its own over them:
    # never blank (a blank pid file is a job not launched yet), or a restart of the container
    # before the supervisor has written would leave the job for good, neither running nor started
    # again. (The rest stays the reserved spaces: the supervisor's line over it leaves nothing.)
    printf '0 0\n%60s' '' 1<>"$dir/pid"
    cd "$cwd" 2>/dev/null || cd /
    export JUPYTER_TRAINER_RESTARTS="$n"
    # the first supervisor's first sample of the log's size is the job's first start, to a moment
    first=
    [ -f "$dir/clock" ] && read -r first _ <"$dir/clock"
    export JUPYTER_TRAINER_FIRST_STARTED_AT="$first"
    # started in the background of this subshell, which ends at once: the container's init reaps it
    if [ -n "$has_input" ]; then
        printf '%s' "$input" | "$@" &
    else
        "$@" </dev/null &
    fi
)

for jobs_dir in "$@"; do
    case $jobs_dir in
    /jupyter_trainer/jobs) kind=mounted ;; # the store's own files (runtime.MOUNTED_JOBS_DIR)
    *) kind=copied ;;
    esac
    # a run's directory: JOBS_DIR/NAME/RUN (the store's, mounted) or JOBS_DIR/STORE_ID/NAME/RUN (copied in)
    for dir in "$jobs_dir"/*/[0-9]* "$jobs_dir"/*/*/[0-9]*; do
        [ -d "$dir" ] && [ ! -h "$dir" ] && start_again "$dir" "$kind" >/dev/null 2>&1
    done
done

while :; do
    tail -f /dev/null &
    wait $!
done
