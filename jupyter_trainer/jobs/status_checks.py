"""A job's status asked without holding up the kernel: the checks that may block run on threads
of their own, and the views go on meanwhile.

A backend says of each job whether its status check may take long, and how a view words the
wait (`Backend.asking`: "asking Slurm…"; "" for a check that reads this machine's files). A check
that cannot take long is made at once, in the caller's thread, as `Job.refresh` makes it. One
that may (a cluster's command, a remote engine over SSH, AWS) is handed to the thread of the
place it asks (one thread per wording: Slurm, SageMaker, each Docker host), which asks the
backend; the caller takes the answer at a later poll and records it in its own thread
(`Job.take_answer`: the same record-write checks as a refresh). Meanwhile the job keeps its last
known status, and a view says that it is asking once a check has been out for SHOWN_AFTER.

One check per job is out at a time: the views of one job (its own, a row of the jobs table, a
comparison) share the question under way. One not answered within DEADLINE is given up: nothing
waits for it any more, and its answer, when it comes, is dropped (the job may have been stopped
or replaced since); the job is asked again at its next check once that call has returned, so a
hung command never piles up questions or threads. The questions waiting for one place are asked
together, as one poll (Slurm: one squeue answers them all).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..core.record import JobRecord, Observation
from .job import Job, one_poll

# Seconds a check may be out before it is given up: longer than the backends' own time limits (a
# Slurm command's is 60 s), so that a command that times out still tells that its place cannot
# be reached; only a call that hangs past its own limit is given up.
DEADLINE = 90.0
SHOWN_AFTER = 1.0  # seconds a check is out before a view says it is asking (most answer at once)
OPEN_WAIT = 1.0  # seconds a view being opened waits for its first answer, at most
IDLE_SECONDS = 30.0  # a place's thread ends once no question came for this long


@dataclass
class _Question:
    job: Job
    record: JobRecord  # as it was when asked
    ask: Callable[[], Observation]
    key: tuple  # the place and the job's run: every view of the job shares the question under way
    answer: Future = field(default_factory=Future)


class _Place:
    """The thread that asks one place (Slurm, SageMaker, a Docker host) for its jobs' statuses."""

    def __init__(self, words: str):
        self.words = words
        self.questions: queue.SimpleQueue[_Question] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"jupyter_trainer-status {words}", daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                first = self.questions.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _places_lock:  # a question is put under this lock: none can come in between
                    if self.questions.empty():
                        if _places.get(self.words) is self:
                            del _places[self.words]
                        return
                continue
            batch = [first]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self.questions.get_nowait())
            with contextlib.suppress(Exception):  # a poll's end that failed: every question is answered by then
                _ask_all(batch)


def _ask_all(batch: list[_Question]) -> None:
    """Answer every question of `batch`, as one poll of their backends where one can be had."""
    with contextlib.ExitStack() as poll:
        with contextlib.suppress(Exception):  # a poll is only a saving: without it each is asked alone
            poll.enter_context(one_poll([question.record for question in batch], batch[0].job.backends))
        for question in batch:
            question.answer.set_running_or_notify_cancel()
            try:
                answer, failure = question.ask(), None
            except BaseException as exc:  # told to the one who asked, in its thread; this one goes on
                answer, failure = None, exc
            # no longer under way before it is answered: a check that gave it up asks again once it
            # is answered, and must then get a new question, never this one's dropped answer
            with _places_lock:
                if _under_way.get(question.key) is question:
                    del _under_way[question.key]
            if failure is None:
                question.answer.set_result(answer)
            else:
                question.answer.set_exception(failure)
            _tell_answered()


_wakes: set[Callable[[], None]] = set()  # called at each answer: the pollers' wakes (see wake_on_answers)
_wakes_lock = threading.Lock()


def wake_on_answers(wake: Callable[[], None]) -> None:
    """Call `wake` (from a place's thread) each time a check is answered: a poller that sleeps
    while its views are quiet, one of them awaiting an answer, takes it at once."""
    with _wakes_lock:
        _wakes.add(wake)


def stop_waking(wake: Callable[[], None]) -> None:
    """No longer call `wake`; once this returns, it is not being called either (its poller may
    close what it wakes)."""
    with _wakes_lock:
        _wakes.discard(wake)


def _tell_answered() -> None:
    with _wakes_lock:
        for wake in _wakes:
            with contextlib.suppress(Exception):
                wake()


_places: dict[str, _Place] = {}
_under_way: dict[tuple, _Question] = {}  # by _Question.key, until answered
_places_lock = threading.Lock()


def _send(words: str, job: Job, ask: Callable[[], Observation]) -> _Question:
    """The question under way of `job`'s status (a view of it may have asked already), else a new one."""
    key = (words, str(job.run_dir))
    with _places_lock:
        question = _under_way.get(key)
        if question is not None:
            return question
        question = _under_way[key] = _Question(job, job.record, ask, key)
        place = _places.get(words)
        if place is None or not place.thread.is_alive():
            place = _places[words] = _Place(words)
            place.thread.start()
        place.questions.put(question)
        return question


def questions_under_way() -> int:
    """How many questions were sent and not answered yet (waiting for their place's thread, or asked)."""
    with _places_lock:
        return len(_under_way)


def asking_threads() -> int:
    """How many threads ask places for statuses now."""
    with _places_lock:
        return sum(place.thread.is_alive() for place in _places.values())


class StatusCheck:
    """One job's status checks, for a view (see the module's doc). `ask` when a check is due,
    `take` at every poll; `words` says what the view shows of a check under way."""

    def __init__(self, job: Job, clock: Callable[[], float] = time.monotonic):
        self.job = job
        self.clock = clock
        self._out: _Question | None = None  # the check under way, until it is answered or given up
        self._asked_at = 0.0
        self._given_up: Future | None = None  # a check given up whose call has not returned yet
        # the first check not answered yet: (clock, wall clock)
        self._unanswered_since: tuple[float, float] | None = None
        self._words = ""
        self._answer: bool | None = None  # a check made at once, not taken yet: whether the record changed

    @property
    def awaiting(self) -> bool:
        """Whether a check is under way whose answer is still awaited (not given up)."""
        return self._out is not None

    @property
    def answered(self) -> bool:
        """Whether `take` has an answer to give."""
        return self._answer is not None or (self._out is not None and self._out.answer.done())

    def ask(self) -> bool:
        """Ask for the job's status, unless a check of it is still under way (False then). What a
        check made at once raises is raised here; `take` gives its answer."""
        if self._out is not None or (self._given_up is not None and not self._given_up.done()):
            return False
        self._given_up = None
        before = _state(self.job)
        question = self.job.status_question()
        words = self._words_for(self.job.record) if question is not None else ""
        if not words:
            if question is not None:
                self.job.take_answer(question())
            self._answer = bool(self._answer) or _changed(before, self.job)
            self._unanswered_since = None
            return True
        now = self.clock()
        self._out, self._asked_at, self._words = _send(words, self.job, question), now, words
        if self._unanswered_since is None:
            self._unanswered_since = (now, time.time())
        return True

    def take(self) -> bool | None:
        """The answer of the last check, recorded now in this thread: whether the job's record
        changed. None while no answer came (or the check was given up). What the check raised is
        raised here."""
        if self._answer is not None:
            answer, self._answer = self._answer, None
            return answer
        out = self._out
        if out is None:
            return None
        if not out.answer.done():
            if self.clock() - self._asked_at >= DEADLINE:
                self._given_up, self._out = out.answer, None
            return None
        self._out = None
        self._unanswered_since = None
        before = _state(self.job)
        self.job.take_answer(out.answer.result())
        return _changed(before, self.job)

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` for the check under way to be answered."""
        if self._out is not None:
            with contextlib.suppress(Exception):
                self._out.answer.exception(timeout=seconds)

    def words(self) -> str:
        """What a view says of the check under way: nothing at first (most answers come at once),
        then the place's words ("asking Slurm…"), and once no answer came within DEADLINE, since
        when ("asking Slurm… no answer since 14:05:03"), until one comes."""
        if self._unanswered_since is None:
            return ""
        since, wall = self._unanswered_since
        waited = self.clock() - since
        if waited < SHOWN_AFTER:
            return ""
        if waited < DEADLINE:
            return self._words
        return f"{self._words} no answer since {time.strftime('%H:%M:%S', time.localtime(wall))}"

    def _words_for(self, record: JobRecord) -> str:
        if not record.runtime:  # still being launched: its submitter's process, on this machine
            return ""
        return self.job.backend_impl().asking(record)


def _state(job: Job) -> tuple:
    """What a view draws of a job's record: the record itself (kept while nothing changed, see
    Job.refresh), and its status."""
    record = job.record
    return record, (record.status, record.exit_code, record.reason)


def _changed(before: tuple, job: Job) -> bool:
    record, said = _state(job)
    return record is not before[0] or said != before[1]


def wait_for_answers(checks: Iterable[StatusCheck], seconds: float = OPEN_WAIT) -> None:
    """Wait up to `seconds` in all for the checks under way to be answered (a view being opened)."""
    deadline = time.monotonic() + seconds
    for check in checks:
        check.wait(max(0.0, deadline - time.monotonic()))
