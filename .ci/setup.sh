# Shared by .ci/run and example_notebooks/run_demo.sh (sourced, bash): installing what a fresh
# Debian or Ubuntu lacks, with a line of progress at least every 15 seconds.

setup_work=${setup_work:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/work}
mkdir -p "$setup_work"

log() { printf '\n== %s\n' "$*"; }

# Run a command with its output in a log file; while it runs, say every 15 s how long it has
# been running and the log's last line, so that a long install is never silent. Interrupted
# (Ctrl-C), it stops the command too: a background command would otherwise run on, apt-get
# holding the package lock.
with_progress() {
    local what=$1 logfile=$2
    shift 2
    # set before the step starts: a Ctrl-C the moment it has started stops it too (a step run in
    # the background ignores SIGINT, and would run on after this script); every background job of
    # this shell is its own or already ended
    trap 'kill -TERM $(jobs -p) 2>/dev/null || :; wait 2>/dev/null || :; exit 130' INT TERM
    "$@" >>"$logfile" 2>&1 </dev/null &
    local pid=$! started=$SECONDS next=$((SECONDS + 15)) last
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if [ "$SECONDS" -ge "$next" ]; then
            last=$(tail -c 2000 "$logfile" | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-90)
            printf '   ... %s: %ss (%s)\n' "$what" $((SECONDS - started)) "$last"
            next=$((SECONDS + 15))
        fi
    done
    trap - INT TERM
    wait "$pid"
}

# Which of these Debian packages are not installed.
missing_packages() {
    local package
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || printf '%s\n' "$package"
    done
}

# Install Debian packages that are missing: as root, or through sudo when it needs no password;
# otherwise say in one line what to install, and fail.
apt_install() {
    local missing
    mapfile -t missing < <(missing_packages "$@")
    [ ${#missing[@]} -eq 0 ] && return 0
    local as_root=()
    if [ "$(id -u)" -ne 0 ]; then
        if sudo -n true 2>/dev/null; then
            as_root=(sudo -n)
        else
            echo "this needs the Debian packages ${missing[*]}: install them (sudo apt-get install ${missing[*]}) and run this again" >&2
            return 1
        fi
    fi
    log "installing ${missing[*]} (log: $setup_work/apt.log)"
    with_progress "apt-get update" "$setup_work/apt.log" "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update ||
        { tail -20 "$setup_work/apt.log"; return 1; }
    with_progress "installing ${missing[*]}" "$setup_work/apt.log" \
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" ||
        { tail -30 "$setup_work/apt.log"; return 1; }
}

# python3 with venv and pip (Debian splits them out of python3 itself).
ensure_python() {
    if command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        return 0
    fi
    apt_install python3 python3-venv
}

# A virtual environment at $1 with `pip install $2...` in it (pip's output in pip-NAME.log, NAME the
# venv's folder without its dot: two venvs may be made at once).
venv_install() {
    local venv=$1
    shift
    local pip_log="$setup_work/pip-$(basename "$venv" | sed 's/^\.//').log"
    log "installing jupyter_trainer into $venv ($*; log: $pip_log)"
    python3 -m venv "$venv"
    with_progress "pip install $*" "$pip_log" "$venv/bin/python" -m pip install --upgrade pip ||
        { tail -30 "$pip_log"; return 1; }
    with_progress "pip install $*" "$pip_log" "$venv/bin/python" -m pip install --progress-bar off -e "$@" ||
        { tail -30 "$pip_log"; return 1; }
}

# Phases, timed: `phase NAME` ends the phase running (if any) and starts NAME; `timed NAME CMD...`
# runs one step of the current phase (steps may run side by side in background lanes: each writes
# its own line); `phase_report [BUDGET-FILE]` ends the last phase and prints every phase's time, its
# steps under it, and the total against the budget in BUDGET-FILE.
# (started empty by `phase_start_report`, never on sourcing: run_demo.sh, which a test runs during the
# suite, sources this file too)
phase_file="$setup_work/phases.tsv"
phase_start_report() { : >"$phase_file"; }
phase_name=
phase_started=
phase_end() {
    [ -n "$phase_started" ] || return 0
    printf 'phase\t%s\t\t%d\n' "$phase_name" $((SECONDS - phase_started)) >>"$phase_file"
    phase_started=
}
phase() {
    phase_end
    phase_name=$1
    phase_started=$SECONDS
}
timed() {
    local name=$1 started=$SECONDS status=0
    shift
    "$@" || status=$?
    printf 'step\t%s\t%s\t%d\n' "$phase_name" "$name" $((SECONDS - started)) >>"$phase_file"
    return $status
}
phase_report() {
    local budget_file=${1:-} budget=0
    phase_end
    [ -s "$phase_file" ] || return 0
    if [ -n "$budget_file" ] && [ -f "$budget_file" ]; then
        budget=$(grep -v '^#' "$budget_file" | head -1 | tr -dc '0-9')
    fi
    log "time of each phase (steps side by side under their phase)"
    awk -F'\t' -v budget="${budget:-0}" '
        $1 == "phase" { order[++phases] = $2; seconds[$2] = $4; total += $4 }
        $1 == "step" { steps[$2] = steps[$2] sprintf("     %-52s %6d s\n", $3, $4) }
        END {
            for (i = 1; i <= phases; i++) { printf "   %-54s %6d s\n%s", order[i], seconds[order[i]], steps[order[i]] }
            printf "   %-54s %6d s\n", "total", total
            if (budget > 0)
                printf "ci-time: %d s of a %d s budget (%.2fx)%s\n", total, budget, total / budget, (total > budget ? ": OVER BUDGET" : "")
        }' "$phase_file"
}
