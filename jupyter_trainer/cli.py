"""`jupyter-trainer`: list, inspect, follow and stop jobs from a terminal, on the same store as the magics."""

from __future__ import annotations

import argparse
import json
import sys

from . import summary
from .errors import TrainerError
from .job import Job, refreshed_records
from .jobs import JobRecord
from .store import JobStore


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 1, as every user error
        raise TrainerError(message, f"see {self.prog} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jupyter-trainer", description="Follow and control jupyter_trainer jobs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="a table of jobs")
    listing.add_argument("--json", action="store_true", help="one JSON array of job objects")
    listing.add_argument("--all", action="store_true", help="include earlier runs of re-run jobs")

    status = commands.add_parser("status", help="one job's status")
    status.add_argument("name")
    status.add_argument("--json", action="store_true", help="one JSON object")

    logs = commands.add_parser("logs", help="a job's log")
    logs.add_argument("name")
    logs.add_argument("-n", "--lines", type=int, default=None, metavar="LINES", help="only the last LINES lines")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")

    stop = commands.add_parser("stop", help="stop a job (its whole process group)")
    stop.add_argument("name")
    stop.add_argument("--container", action="store_true", help="also stop the job's container")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = JobStore()
    if args.command == "list":
        items = refreshed_records(store, all_runs=args.all)
        if args.json:
            rows = [summary.status_json(item) for item in items if isinstance(item, JobRecord)]
            print(json.dumps(rows, indent=1))
            for item in items:
                if isinstance(item, TrainerError):
                    print(f"jupyter-trainer: {item}", file=sys.stderr)
        else:
            print(summary.jobs_table(items))
        return 0
    job = Job.load(args.name, store)
    if args.command == "status":
        record = job.refresh().record
        print(json.dumps(summary.status_json(record), indent=1) if args.json else summary.status_block(record))
    elif args.command == "logs":
        if args.lines is not None and args.lines < 0:
            raise TrainerError("-n expects a number of lines, 0 or more")
        if args.follow:
            for line in job.follow(tail=args.lines):
                print(line, flush=True)
        else:
            for line in job.log_lines(tail=args.lines):
                sys.stdout.write(line + "\n")
    elif args.command == "stop":
        print(summary.one_line(job.stop(container=args.container).record))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except TrainerError as error:
        print(f"jupyter-trainer: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `jupyter-trainer logs NAME | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
