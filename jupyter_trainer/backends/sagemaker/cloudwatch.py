"""Following a SageMaker training job with plain boto3: its status, and its CloudWatch logs.

The SDK's `attach()` and `logs()` block until the job ends, so they are not
used. The log of every stream of the job (one per host) is copied into the
run's `output.log`, merged by timestamp; the read position of each stream is
saved with the log's length, so a new kernel or the CLI resumes exactly where
the last reader stopped: no line is fetched twice or lost.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ...core.files import flocked, write_private_file
from ...core.record import Observation, Status
from ...errors import BackendUnavailable, TrainerError
from ..base import FileLogSource
from .declared import CLOUDWATCH_LOCK_FILE as LOCK_FILE
from .declared import CLOUDWATCH_STATE_FILE as STATE_FILE
from .errors import NO_LOG_YET, has_code, no_credentials, translate, unreadable_configuration
from .reasons import headline, kept_text

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
SYNC_INTERVAL = 10.0  # seconds between two log fetches of one job: the SDK's own follower polls as often
PAGE = 10_000  # events asked for per GetLogEvents call (the API's most); a shorter page is the stream's end


def aws_session(region: str | None = None):
    """A boto3 session from the standard configuration chain, or one clear line saying what is missing."""
    import boto3
    import botocore.exceptions

    try:
        session = boto3.Session(region_name=region) if region else boto3.Session()
        credentials = session.get_credentials()
    except botocore.exceptions.BotoCoreError as exc:
        raise unreadable_configuration(exc) from exc
    if credentials is None:
        raise no_credentials()
    if not session.region_name:
        raise BackendUnavailable("no AWS region configured", "set AWS_DEFAULT_REGION or a region in your AWS profile")
    return session


def client(session, service: str):
    from botocore.config import Config

    # adaptive retries back off on throttling before an error reaches us
    return session.client(service, config=Config(retries={"mode": "adaptive", "max_attempts": 10}))


def observe_training_job(description: dict) -> Observation:
    """DescribeTrainingJob's answer as an observation of the job."""
    status = description.get("TrainingJobStatus")
    details = training_details(description)
    ended_at = _timestamp(description.get("TrainingEndTime"))
    if status == "Completed":
        return Observation(exit_code=0, alive=False, started=True, ended_at=ended_at, details=details)
    if status == "Failed":
        reason = details["failure_reason"] or "the training job failed"
        return Observation(
            final=Status.FAILED,
            reason=reason,
            headline=headline(reason),
            alive=False,
            started=True,
            ended_at=ended_at,
            details=details,
        )
    if status == "Stopped":
        reason = "the training job was stopped"
        return Observation(
            final=Status.STOPPED, reason=reason, alive=False, started=True, ended_at=ended_at, details=details
        )
    secondary = description.get("SecondaryStatus") or status or "Starting"
    started = secondary not in ("Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack")
    return Observation(alive=True, started=started, details=details)


def _timestamp(value) -> float | None:
    return value.timestamp() if hasattr(value, "timestamp") else None


def training_details(description: dict) -> dict:
    """What the record keeps about a training job (in its runtime facts). Its words are the job's
    own (FailureReason is what the container wrote): kept printable and bounded."""
    details = {
        "secondary_status": description.get("SecondaryStatus"),
        "failure_reason": description.get("FailureReason"),
        "billable_seconds": description.get("BillableTimeInSeconds"),
        "model_artifacts": (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
    }
    return {key: kept_text(value) if isinstance(value, str) else value for key, value in details.items()}


@dataclass
class SyncState:
    tokens: dict[str, str]
    log_size: int

    @classmethod
    def load(cls, path: Path) -> "SyncState":
        try:
            data = json.loads(path.read_text())
            return cls(dict(data["tokens"]), int(data["log_size"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return cls({}, 0)

    def save(self, path: Path) -> None:
        write_private_file(path, json.dumps({"tokens": self.tokens, "log_size": self.log_size}).encode())


def host_of(stream: str) -> str:
    """A log stream's host ("JOB/algo-2-1700000000" -> "algo-2"), named as local mode names it."""
    name = stream.rsplit("/", 1)[-1]
    return re.sub(r"-\d{6,}$", "", name)


class CloudWatchLogSync:
    """Copies a training job's CloudWatch log streams into one local log file."""

    def __init__(self, logs_client, job_name: str, run_dir: Path, log_path: Path, hosts: int = 1):
        self.logs = logs_client
        self.job_name = job_name
        self.hosts = hosts  # with more than one, each line says its host, as in local mode
        self.run_dir = run_dir
        self.log_path = log_path
        self.api_calls = 0

    def sync(self) -> int:
        """Fetch what is new in every stream; return the number of lines appended."""
        with flocked(self.run_dir / LOCK_FILE):
            state = SyncState.load(self.run_dir / STATE_FILE)
            self._truncate_to(state.log_size)  # lines written after the last saved position are fetched again
            events = []
            for order, stream in enumerate(self._streams()):
                prefix = f"[{host_of(stream)}] " if self.hosts > 1 else ""
                events += [
                    (event["timestamp"], order, index, prefix + event["message"])
                    for index, event in enumerate(self._new_events(stream, state))
                ]
            if events:
                events.sort()
                text = "".join(message if message.endswith("\n") else message + "\n" for *_, message in events)
                with open(self.log_path, "ab") as log:
                    log.write(text.encode())
                    log.flush()
                    os.fsync(log.fileno())
            state.log_size = os.path.getsize(self.log_path)
            state.save(self.run_dir / STATE_FILE)
            return len(events)

    def _streams(self) -> list[str]:
        names, token = [], None
        while True:
            kwargs = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{self.job_name}/"}
            if token:
                kwargs["nextToken"] = token
            try:
                self.api_calls += 1
                page = self.logs.describe_log_streams(**kwargs)
            except Exception as exc:
                if has_code(exc, NO_LOG_YET):  # the job has not started writing
                    return names
                raise
            names += [stream["logStreamName"] for stream in page.get("logStreams", [])]
            token = page.get("nextToken")
            if not token:
                return names

    def _new_events(self, stream: str, state: SyncState) -> list[dict]:
        events: list[dict] = []
        token = state.tokens.get(stream)
        while True:
            kwargs = {"logGroupName": LOG_GROUP, "logStreamName": stream, "startFromHead": True, "limit": PAGE}
            if token:
                kwargs["nextToken"] = token
            self.api_calls += 1
            page = self.logs.get_log_events(**kwargs)
            events += page.get("events", [])
            next_token = page.get("nextForwardToken")
            if not next_token or next_token == token:  # the same token again: the end of the stream for now
                break
            token = next_token
            if len(page.get("events", [])) < PAGE:  # a short page is the end: no call just to confirm it
                break
        if token:
            state.tokens[stream] = token
        return events

    def _truncate_to(self, size: int) -> None:
        if os.path.exists(self.log_path) and os.path.getsize(self.log_path) > size:
            os.truncate(self.log_path, size)


class SyncedLogSource(FileLogSource):
    """The local copy of a job's CloudWatch log, refreshed at most every SYNC_INTERVAL seconds."""

    def __init__(self, syncer: CloudWatchLogSync, clock=time.monotonic):
        super().__init__(syncer.log_path)
        self.syncer = syncer
        self.clock = clock
        self.last_sync = float("-inf")

    def _sync_if_due(self) -> None:
        if self.clock() - self.last_sync >= SYNC_INTERVAL:
            self.last_sync = self.clock()
            try:
                self.syncer.sync()
            except TrainerError:
                raise
            except Exception as exc:
                raise translate(exc, "read the training job's log") from exc

    def size(self) -> int:
        self._sync_if_due()
        return super().size()

    def read(self, offset: int, limit: int) -> bytes:
        self._sync_if_due()
        return super().read(offset, limit)
