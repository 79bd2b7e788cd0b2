"""Tasks by name: typed functions a worker runs, sent by name with JSON arguments.

``tasks = Tasks()`` is a registry; ``@tasks.task`` (or ``@tasks.task(name=..., max_attempts=...,
timeout=..., priority=...)``) declares a plain or ``async def`` function as a task, with no Redis
involved. A producer sends a call with ``q.send(task, *args, **kwargs)`` (checked against the
function's signature, by mypy and at run time) or ``q.send("name", *args, **kwargs)`` (for a producer
that does not import the workers' code: only JSON is checked). A worker serves the registry:
``JOB_HANDLER=module:tasks``; the registry is the handler.

The wire format (docs/reference.md#the-task-envelope), the contract for producers in any language: a
job's payload is a JSON object ``{"task": NAME, "args": [...], "kwargs": {...}, "v": 1}``. Any other
payload is not a task call: the registry hands it to its ``default`` handler, if it has one.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from setqueue.jobs import ENVELOPE_VERSION, JobRef, Lease, PermanentJobError, envelope_parts
from setqueue.keys import IF_DEPENDENCY_FAILS, check_seconds, validate_group, validate_job_id, validate_priority

P = ParamSpec("P")
R = TypeVar("R")

# What an enqueue or send does with an id the queue knows (enqueue.lua): "ignore" leaves the job as it
# is; "replace" makes a waiting job this call's (debounce); "rerun" runs an ended job again.
IF_EXISTS = ("ignore", "replace", "rerun")

_current_lease: contextvars.ContextVar[Lease] = contextvars.ContextVar("setqueue_current_lease")


def current_lease() -> Lease:
    """The lease of the task running in this thread or task (its id, attempt, ``progress()``);
    LookupError outside a task run by a worker."""
    try:
        return _current_lease.get()
    except LookupError:
        raise LookupError("current_lease() is for code run by a worker as a task") from None


def validate_task_name(name: str) -> str:
    """A task name: 1 to 200 printable characters, no white space (it names the task in logs, metric
    labels and the envelope). ValueError otherwise."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 200
        or not name.isprintable()
        or any(c.isspace() for c in name)
    ):
        raise ValueError(f"a task name is 1 to 200 printable characters without white space, got {name!r}")
    return name


def new_job_id() -> str:
    """A fresh job id that sorts by time: 13 hex digits of Unix milliseconds, a dash, 16 random hex."""
    return f"{time.time_ns() // 1_000_000:013x}-{os.urandom(8).hex()}"


@dataclass(frozen=True, slots=True)
class SendOptions:
    """Job options of one send (None: the task's, else the worker's or queue's default)."""

    id: str | None = None
    delay: float | None = None
    at: float | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    group: str | None = None
    if_exists: str = "ignore"
    retry_timeouts: bool | None = None  # a timeout retried like any failure, or dead-letters the job at once
    depends_on: tuple[Dependency, ...] | None = None  # jobs it waits for (docs/guide.md#dependencies)
    if_dependency_fails: str | None = None  # "fail" (the default) or "run"

    def __post_init__(self) -> None:
        if self.id is not None:
            validate_job_id(self.id)
        if self.delay is not None:
            check_seconds("delay", self.delay)
        if self.at is not None:
            check_seconds("at", self.at)
        if self.delay is not None and self.at is not None:
            raise ValueError("give delay or at, not both")
        if self.priority is not None:
            validate_priority(self.priority)
        if self.max_attempts is not None and (isinstance(self.max_attempts, bool) or self.max_attempts < 1):
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts!r}")
        if self.timeout is not None:
            check_seconds("timeout", self.timeout)
        if self.group is not None:
            validate_group(self.group)
        if self.if_exists not in IF_EXISTS:
            raise ValueError(f"if_exists must be one of {', '.join(IF_EXISTS)}, got {self.if_exists!r}")
        if self.depends_on is not None:
            check_dependencies(self.depends_on)
        if self.if_dependency_fails is not None and self.if_dependency_fails not in IF_DEPENDENCY_FAILS:
            choices = ", ".join(IF_DEPENDENCY_FAILS)
            raise ValueError(f"if_dependency_fails must be one of {choices}, got {self.if_dependency_fails!r}")

    def over(self, defaults: SendOptions) -> SendOptions:
        """These options, each unset one taken from ``defaults``."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "if_exists"}
        merged = {name: value if value is not None else getattr(defaults, name) for name, value in given.items()}
        return SendOptions(**merged, if_exists=self.if_exists)


@dataclass(frozen=True, slots=True)
class Sent(Generic[R]):
    """What ``send`` returns: the job's ``id``, and ``created`` (False: a job of that id was known, and
    nothing changed), the ``task``'s name and the ``queue`` it went to; a later send or enqueue can name
    it as a dependency (``depends_on``). ``R``: the task's return type, what ``result(id)`` gives once it
    ran."""

    id: str
    created: bool
    task: str
    queue: str = ""


@dataclass(frozen=True, slots=True)
class Call(Generic[R]):
    """One call of a task, checked, not sent yet (``Task.call``): what ``queue.chain`` and
    ``queue.fan_in`` send. ``payload``: its task envelope."""

    task: Task[..., R]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    payload: str


@dataclass(frozen=True, slots=True)
class FanIn(Generic[R]):
    """What ``queue.fan_in`` sent: the ``members`` and the ``callback`` that waits for all of them
    (``inspect(callback.id).waiting_on`` says how many ended, and how)."""

    members: list[Sent[Any]]
    callback: Sent[R]


# A dependency as a caller names it: a job id of the same queue, what send returned, or a job of any
# queue (docs/guide.md#dependencies).
Dependency = str | Sent[Any] | JobRef


def check_dependencies(dependencies: Iterable[object]) -> None:
    """TypeError for a dependency that is not a job id (str), a ``Sent`` or a ``JobRef``; ValueError for a
    malformed id. Nothing is looked up (whether each exists is the enqueue's to check)."""
    for dependency in dependencies:
        if isinstance(dependency, str):
            validate_job_id(dependency)
        elif not isinstance(dependency, Sent | JobRef):
            raise TypeError(f"a dependency is a job id, a Sent or a JobRef, not {type(dependency).__name__}")


class Task(Generic[P, R]):
    """A function declared as a task: ``name``, the default job options of its calls, and the function.
    Calling the task calls the function directly (no queue involved)."""

    def __init__(self, func: Callable[P, Any] | None, name: str, defaults: SendOptions) -> None:
        self.func = func
        self.name = validate_task_name(name)
        self.defaults = defaults
        self.signature = None if func is None else inspect.signature(func)
        self.is_async = inspect.iscoroutinefunction(func)
        # Its own retry delays: (base, most) seconds, either None for the worker's; None: none of its own.
        self.backoff: tuple[float | None, float | None] | None = None
        # A signature of plain parameters only (no *args, **kwargs, keyword- or positional-only ones) is
        # checked without inspect's bind, a few times faster, on every send and every run.
        plain = self.signature is not None and all(
            p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in self.signature.parameters.values()
        )
        params = list(self.signature.parameters.values()) if plain and self.signature is not None else []
        self._plain_names = tuple(p.name for p in params) if plain else None
        self._place = {name: n for n, name in enumerate(self._plain_names or ())}
        self._required = sum(1 for p in params if p.default is inspect.Parameter.empty)
        self.__doc__ = None if func is None else func.__doc__

    @classmethod
    def named(cls, name: str) -> Task[..., Any]:
        """A task known by its name only, for a producer that does not import the workers' code: its sends
        can carry job options (``named("charge_card").options(id=...)``); their arguments are checked
        as JSON only. ValueError for a bad name."""
        return Task(None, name, SendOptions())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        if self.func is None:
            raise TypeError(f"task {self.name} is known by its name only here: send it, it runs on a worker")
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        """This task's call with these arguments, to send later as a step of ``queue.chain`` or a member
        (or the callback) of ``queue.fan_in``: checked now as ``send`` checks it (TypeError)."""
        self.check_call(args, kwargs)
        return Call(self, args, kwargs, envelope(self.name, args, kwargs))

    def options(
        self,
        *,
        id: str | None = None,
        delay: float | None = None,
        at: float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        group: str | None = None,
        if_exists: str = "ignore",
        retry_timeouts: bool | None = None,
        depends_on: Iterable[Dependency] | None = None,
        if_dependency_fails: str | None = None,
    ) -> Task[P, R]:
        """A copy of this task whose sends carry these job options (over the task's own; see
        ``setqueue.Queue.enqueue``). ValueError for a bad one, TypeError for a dependency that is not
        an id, a ``Sent`` or a ``JobRef``."""
        deps = None if depends_on is None else tuple(depends_on)
        given = SendOptions(
            id, delay, at, priority, max_attempts, timeout, group, if_exists, retry_timeouts, deps, if_dependency_fails
        )
        return Task(self.func, self.name, given.over(self.defaults))

    def _fits(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Whether the call surely binds to a plain signature (False: let inspect's bind decide and say why)."""
        names = self._plain_names
        if names is None or len(args) > len(names):
            return False
        if not kwargs:  # the common call: positional arguments only
            return len(args) >= self._required
        for name in kwargs:
            place = self._place.get(name)
            if place is None or place < len(args):  # unknown, or given twice
                return False
        return all(names[n] in kwargs for n in range(len(args), self._required))

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """TypeError naming the task and the argument when ``args``/``kwargs`` do not bind to the function
        (missing, extra or unknown keyword); a task known by its name only takes any."""
        if self.signature is None or self._fits(args, kwargs):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.name}: {exc}") from None


def envelope(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The payload of a call of task ``name``; TypeError naming the task and the argument that JSON
    cannot carry (NaN and infinities included), checked before anything is sent. Empty ``args`` and
    ``kwargs`` are left out, as the envelope allows: a shorter payload to keep and to read on every run."""
    call: dict[str, Any] = {"task": name}
    if args:
        call["args"] = list(args)
    if kwargs:
        call["kwargs"] = dict(kwargs)
    call["v"] = ENVELOPE_VERSION
    try:
        return json.dumps(call, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # which argument? (only now: one dump a call otherwise)
        for where, value in [*((f"argument {n + 1}", a) for n, a in enumerate(args)), *kwargs.items()]:
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"task {name}: {where} is not JSON ({exc})") from None
        raise


def prepare_send(
    task: Task[Any, Any] | str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[str, SendOptions, str]:
    """The task's name, the send's job options and the payload of ``task(*args, **kwargs)``, all checked:
    TypeError naming the task and the argument (a ``Task``: the signature too; a name: JSON only),
    ValueError for a bad name."""
    if isinstance(task, Task):
        task.check_call(args, kwargs)
        return task.name, task.defaults, envelope(task.name, args, kwargs)
    if not isinstance(task, str):
        raise TypeError(f"send takes a task or a task's name, not {type(task).__name__}")
    return validate_task_name(task), SendOptions(), envelope(task, args, kwargs)


class Tasks:
    """A registry of tasks, and the handler a worker runs for it (``JOB_HANDLER=module:tasks``).

    ``default``: the handler of jobs whose payload is not a task call (None: they fail at once)."""

    def __init__(self, default: Callable[[Lease], Any] | None = None) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}
        self.default = default
        self._runs: dict[tuple[str, str], str] | None = None  # see note_runs

    @overload
    def task(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        /,
        *,
        name: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        retry_timeouts: bool | None = None,
        retry_backoff_seconds: float | None = None,
        retry_backoff_max_seconds: float | None = None,
    ) -> _Declare: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        retry_timeouts: bool | None = None,
        retry_backoff_seconds: float | None = None,
        retry_backoff_max_seconds: float | None = None,
    ) -> Task[Any, Any] | _Declare:
        """Declare ``func`` a task named ``name`` (default: ``module.function``) whose jobs get these
        options unless a send gives its own (``retry_timeouts``: a timeout retried like any failure, or
        the job dead-lettered at once; None: the worker's RETRY_TIMEOUTS). ``retry_backoff_seconds`` and
        ``retry_backoff_max_seconds``: the retry delays of its failures, as the queue options of those
        names (None: the worker's). ValueError for a name declared twice or a bad option."""
        defaults = SendOptions(
            priority=priority, max_attempts=max_attempts, timeout=timeout, retry_timeouts=retry_timeouts
        )
        for option, seconds in (
            ("retry_backoff_seconds", retry_backoff_seconds),
            ("retry_backoff_max_seconds", retry_backoff_max_seconds),
        ):
            if seconds is not None:
                check_seconds(option, seconds)
        backoff = None
        if retry_backoff_seconds is not None or retry_backoff_max_seconds is not None:
            backoff = (retry_backoff_seconds, retry_backoff_max_seconds)
        declare = _Declare(self, name, defaults, backoff)
        return declare if func is None else declare(func)

    def backoff_of(self, name: str) -> tuple[float | None, float | None] | None:
        """Task ``name``'s own retry delays: (base, most) seconds, either None for the worker's; None for
        none of its own (or no such task)."""
        task = self._tasks.get(name)
        return None if task is None else task.backoff

    def add(self, task: Task[Any, Any]) -> None:
        """Serve ``task``; ValueError for a name taken, or a task known by its name only."""
        if task.func is None:
            raise ValueError(f"task {task.name} has no function to serve")
        if task.name in self._tasks:
            raise ValueError(f"a task named {task.name!r} is declared twice")
        self._tasks[task.name] = task

    def __getitem__(self, name: str) -> Task[Any, Any]:
        return self._tasks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def names(self) -> list[str]:
        """The names of the tasks declared, sorted."""
        return sorted(self._tasks)

    def note_runs(self) -> dict[tuple[str, str], str]:
        """From now on, note each run of a declared task in the dict returned (the lease's ``(token, id)``
        -> the task's name), for a worker's metrics by task: the worker pops a run's entry once it counts
        its outcome. A job that names no declared task is not noted. Idempotent: the same dict each time."""
        if self._runs is None:
            self._runs = {}
        return self._runs

    def __call__(self, lease: Lease) -> Any:
        """Run the job's task (a coroutine for an ``async def`` one, which the worker awaits). An unknown
        task, a call its function does not accept, or a payload that is no task call without a default
        handler raises PermanentJobError: the job fails at once, with the reason."""
        call = envelope_parts(lease.payload)
        if call is None:
            if self.default is None:
                raise PermanentJobError(f"job {lease.id!r} is not a task call, and this worker has no default handler")
            return self.default(lease)
        name, args, kwargs = call
        task = self._tasks.get(name)
        if task is None:
            known = ", ".join(self.names) or "none"
            raise PermanentJobError(f"unknown task {name!r}: this worker serves {known}")
        if self._runs is not None:
            self._runs[lease.token, lease.id] = name
        if task.is_async:
            return _run_async(task, lease, args, kwargs)
        token = _current_lease.set(lease)
        try:
            return task.func(*args, **kwargs)  # type: ignore[misc] # a declared task has its function
        except TypeError:  # the call's arguments, or the function's own code? Checked only now: rare
            _refuse_a_misfit(task, args, kwargs)
            raise
        finally:
            _current_lease.reset(token)


def _refuse_a_misfit(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> None:
    """PermanentJobError when the arguments do not bind to the task's function (no retry makes them);
    nothing when they do (the TypeError came from the function's own code: a failure like any other)."""
    try:
        task.check_call(args, kwargs)
    except TypeError as exc:
        raise PermanentJobError(f"{exc}: the call does not fit the function") from None


async def _run_async(task: Task[Any, Any], lease: Lease, args: list[Any], kwargs: dict[str, Any]) -> Any:
    _current_lease.set(lease)  # this coroutine runs in a context of its own
    try:
        result: Awaitable[Any] = task(*args, **kwargs)
    except TypeError:
        _refuse_a_misfit(task, args, kwargs)
        raise
    return await result


class _Declare:
    """``@tasks.task(...)`` with options: the decorator that declares the function."""

    def __init__(
        self,
        registry: Tasks,
        name: str | None,
        defaults: SendOptions,
        backoff: tuple[float | None, float | None] | None = None,
    ) -> None:
        self.registry = registry
        self.name = name
        self.defaults = defaults
        self.backoff = backoff

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, func: Callable[..., Any], /) -> Task[Any, Any]:
        name = self.name or f"{func.__module__}.{func.__qualname__}"
        task: Task[Any, Any] = Task(func, name, self.defaults)
        task.backoff = self.backoff
        self.registry.add(task)
        return task
