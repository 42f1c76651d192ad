"""What 20 quiet watched jobs cost a kernel, thread by thread: the poller's and the usage looker's
share of a core, from each thread's CPU time in /proc, side by side with another checkout.

    python benchmarks/idle_threads.py                      # this checkout alone
    python benchmarks/idle_threads.py --against OLD_DIR    # and a checkout of another version, alternating

Each round runs in a fresh interpreter (its own store, its own 20 host jobs printing a line every
5 s), lets the views settle for 5 s, then measures for --seconds. Rounds of the two checkouts
alternate, so that the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One round, in its own interpreter with the checkout to measure first on sys.path.
ROUND = r"""
import json, os, sys, threading, time
sys.path[:0] = [sys.argv[1] + "/benchmarks", sys.argv[1]]
import run as bench
bench.fresh_home()
poller, jobs = bench.start_watching(20, bench.QUIET_JOB)
time.sleep(5)
tick = os.sysconf("SC_CLK_TCK")

def per_thread():
    seen = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seen[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return seen

names = {thread.native_id: thread.name for thread in threading.enumerate()}
before, wall, cpu = per_thread(), time.monotonic(), time.process_time()
time.sleep(float(sys.argv[2]))
after, wall, cpu = per_thread(), time.monotonic() - wall, time.process_time() - cpu
shares = {"process": cpu / wall}
for tid, seconds in after.items():
    name = names.get(tid, "")
    if name.startswith("jupyter_trainer-"):
        key = name.split("-", 1)[1].rstrip("_0123456789")
        shares[key] = shares.get(key, 0.0) + (seconds - before.get(tid, 0.0)) / wall
with poller._lock:
    poller.widgets = []
for job in jobs:
    job.stop()
print(json.dumps(shares))
"""


def one_round(checkout: Path, seconds: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", ROUND, str(checkout), str(seconds)], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="a checkout of another version, measured in alternate rounds")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    checkouts = {"this": HERE.parent} | ({"against": args.against.resolve()} if args.against else {})
    shares: dict[str, list[dict[str, float]]] = {label: [] for label in checkouts}
    for _ in range(args.rounds):
        for label, checkout in checkouts.items():
            shares[label].append(one_round(checkout, args.seconds))
    for label, rounds in shares.items():
        keys = sorted({key for one in rounds for key in one})
        medians = {key: statistics.median(one.get(key, 0.0) for one in rounds) for key in keys}
        print(f"{label} ({checkouts[label]}): " + ", ".join(f"{key} {value:.2%} of a core" for key, value in medians.items()))


if __name__ == "__main__":
    main()
