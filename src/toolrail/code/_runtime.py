"""Running one ``run_code`` program in the sandbox (code-mode.md, "Running a program").

A program runs in a fresh ``pydantic_monty`` session: type-checked against the SDK,
then driven one suspension at a time by one of the pool's threads, which runs the whole
program as one sandbox operation (``_pool``). Each ``tools.<name>(args)`` the program
makes is answered at once with a pending future and handed to the event loop when it is
due to start (at once if the program awaits it, else when the program next waits); on
the loop, it is submitted as a nested call to a scheduler driver of its own — the same
``Driver`` that runs a model step, kept open while the program runs — so nested calls
follow the native contract: classified just before they start, overlapping up to
``max_parallel``, prepared and committed one at a time in submission order. When the
program awaits, the thread waits for the loop to commit the calls it needs, and gives
the program each committed result (the thawed value, or a ``ToolCallError``).

Threads: the program's thread owns the sandbox's snapshots and what it counts of them
(``calls``, ``pending``, ``called``); the loop owns the driver and the results. The
thread hands over a call with ``call_soon_threadsafe`` (so calls reach the driver in
the program's order), the loop hands back a settled call under ``turn``.

Ownership: the driver runs in ``run_code``'s own task while the program's thread runs
the program, and the run's end closes the driver's feed: when the program ends, calls it
submitted but that never started are dropped; started ones are awaited and committed
before ``run_code`` returns. When the body signal fires, the same happens at once, then
the program is halted: its worker is killed before ``run_code`` returns. Nothing the
program started outlives ``run_code``: no task is made for it (the driver's dispatch
tasks are the driver's), its timers are cancelled, and its thread's run has ended. The
sessions come from the registry's ``SandboxPool`` (``_pool``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._core.presentation import RUN_CODE
from .._model.errors import CodeFailedError, ToolAbortedError, ToolArgsError
from .._model.lossless import snapshot_json, thaw
from .._model.results import ContextMessage, ImageContent, TextContent, ToolOutput, ToolResult
from .._model.tool import ToolCall
from .._scheduling.scheduler import program_driver
from ._pool import SandboxPool, ended
from ._sdk import error_text

if TYPE_CHECKING:
    from .._dispatch.execution import RunContext
    from .._registry.registry import ToolRegistry
    from ._settings import CodeSettings

__all__ = ["CodeFailedError", "run_program"]

_DEATH_WAIT: Final = 2.0  # seconds a killed worker has to exit
ENDED: Final = "the program ended"
STARTING, LIVE, OVER = "starting", "live", "over"  # a program's phases
_DEPTH: Final = 100  # levels of arrays and objects a program's result may nest
_COROUTINE: Final = re.compile(r"<coroutine external_future\((\d+)\)>")  # a call's repr
_LOOK: Final = 1.0  # seconds between a waiting program thread's looks at its event loop
_ASYNC_SLEEP: Final = "system.async_sleep"  # the sandbox's OS calls that sleep
_SLEEP: Final = "system.sleep"
_LONGEST: Final = threading.TIMEOUT_MAX  # a sleep past it ends at max_duration anyway


_FAILURES: dict[str, type[CodeFailedError]] = {}


def _failure(kind: str, message: str, logs: str, type_name: str | None) -> CodeFailedError:
    """The error of a failed run, its class named for the sandbox's exception class."""
    text = f"code run failed ({kind}): {message}"
    if logs:
        text += f"\nCaptured output:\n{logs}"
    name = type_name or "CodeFailedError"
    cls = _FAILURES.get(name)
    if cls is None:
        cls = _FAILURES[name] = type(name, (CodeFailedError,), {"__module__": __name__})
    return cls(text)


async def run_program(registry: ToolRegistry, sdk: str, methods: frozenset[str],
                      arguments: Any, ctx: RunContext) -> ToolOutput:
    """``run_code``'s body for ``{"code": source}``."""
    code = arguments.get("code") if isinstance(arguments, Mapping) else None
    if not isinstance(code, str):
        raise ToolArgsError('invalid arguments: "code" must be a string',
                            violations=('"code" must be a string',))
    extra = tuple(f'unexpected property "{key}"' for key in arguments if key != "code")
    if extra:  # the transport's schema has "additionalProperties": false
        raise ToolArgsError("invalid arguments: " + "; ".join(extra), violations=extra)
    settings = registry._code_settings(ctx.scope)
    pool = await registry._sandbox()
    program = _Program(registry, ctx, settings, methods)
    pool.running.add(program)
    try:
        return await program.run(pool, sdk, code)
    finally:
        pool.running.discard(program)
        program.done.set()


class _Halted(Exception):
    """The program's thread stops waiting: the program was halted (``_Program._halt``),
    or the event loop that would commit its calls is gone."""


class _Program:
    """One program: its sandbox thread, its nested calls' driver, and what they produced."""

    def __init__(self, registry: ToolRegistry, ctx: RunContext, settings: CodeSettings,
                 methods: frozenset[str]) -> None:
        self.registry = registry
        self.ctx = ctx
        self.settings = settings
        self.methods = methods
        self.driver = program_driver(registry._core, settings.max_parallel)
        self.loop = asyncio.get_running_loop()
        # The loop's: each submitted call's tool name and sandbox call id, by driver index.
        self.names: list[str] = []
        self.ids: list[int] = []
        self.results: dict[int, ToolResult] = {}  # committed, by driver index
        self.stopping: str | None = None
        self.phase = STARTING  # then LIVE while its run is under way, then OVER
        self.task: asyncio.Task[Any] | None = None  # the one running the program
        self.interrupted = False  # its wait for a session was cancelled by a stop
        self.done = asyncio.Event()
        self.lookalikes: set[str] = set()  # values of calls that read like a call's repr
        self.failure: Exception | None = None  # a call the loop could not submit
        self.pool: SandboxPool | None = None
        self.pid: int | None = None
        self.killed = False  # its worker was sent SIGKILL
        self.overran = False  # it ran past ``max_duration``, and was halted
        # The thread's (read by the loop once the program's run has ended):
        self.calls = 0
        self.over_calls = False
        self.parsed = False  # the program passed its type check (or had none)
        self.pending: set[int] = set()  # the sandbox's ids of calls given no value yet
        self.called: dict[int, str] = {}  # the sandbox's call id -> the tool's name
        # Shared, under ``turn``: the loop's settled calls for the thread, by sandbox id.
        self.turn = threading.Condition(threading.Lock())
        self.settled: dict[int, Any] = {}
        self.outbox: list[tuple[int, int, str, Any, bool]] = []  # calls for the loop
        self.handed = False  # the loop has been asked to take the outbox, and has not yet
        self.timers: list[asyncio.TimerHandle] = []  # the loop's: its deadline and sleeps
        self.halted = False

    def stop(self, reason: str) -> None:
        """Stop the program: no call starts any more; started ones finish and commit.
        Stopped from outside (not ``ENDED``), the program is then halted (``_step``),
        or its wait for a session cancelled if its run has not begun."""
        if self.stopping is None:
            self.stopping = reason
            self.driver.close_feed()
            if reason != ENDED:
                self.driver.cancel(reason)  # the started nested calls see their signal
                if self.phase is STARTING and self.task is not None:
                    self.interrupted = True
                    self.task.cancel()

    async def run(self, pool: SandboxPool, sdk: str, code: str) -> ToolOutput:
        # The program's task runs its nested calls' driver while its thread runs it.
        self.pool = pool
        self.task = task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        unhook = self.ctx.signal.add_callback(lambda: self.stop("cancelled"))
        try:
            outcome = await self._program(pool, sdk, code)
        except asyncio.CancelledError:
            # Stopped while it waited for its session (``stop``), as a timeout scope
            # takes back the cancellation it made; any other is not ours.
            if not self.interrupted or task.uncancel() > cancelling:
                raise
            outcome = None
        finally:
            unhook()
            self.stop(ENDED)
            for timer in self.timers:  # the deadline, and sleeps the program left
                timer.cancel()
            await self._dead()
        self._forward()
        if self.stopping != ENDED:
            # Stopped: by registry.aclose(), or by the body signal, whoever fired it (the
            # caller, the tool's timeout, or an around-execute middleware's own deadline).
            # A stopped program has no outcome of its own: it is aborted. (Where the
            # pipeline knows better, the caller's signal or a timeout, its result wins.)
            if self.stopping == "cancelled":
                raise ToolAbortedError("tool call aborted")
            raise ToolAbortedError(f"tool call aborted: {self.stopping}")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    async def _dead(self) -> None:
        """Wait until a killed worker has exited: a SIGKILL is delivered when the kernel
        next schedules it, so on a busy machine it may run a moment after ``kill``. The
        worker is our child, but the sandbox's runtime reaps it: this waits on its pidfd
        (polling only where there is none), without reaping it."""
        if self.killed and self.pool is not None and self.pid is not None:
            await self.pool.exited(self.pid, _DEATH_WAIT)

    def _kill(self) -> None:
        # Called while the session still holds the worker, so the pid is still its own
        # (the pool kills through the worker's pidfd); the pool replaces the worker.
        if self.pid is not None and self.pool is not None and self.pool.kill(self.pid):
            self.killed = True

    async def _step(self, running: concurrent.futures.Future[Any]) -> Any:
        """The program's run on its thread, awaited to its end while this task drives
        its nested calls: the run's end closes the driver's feed (``ENDED``), and the
        driver returns once every started call has committed. A program stopped from
        outside is halted once its started calls have committed; one whose task is
        cancelled (or whose driver fails) once the driver has wound down (its dispatch
        tasks cancelled and ended). Its thread's run has always ended when this
        returns."""
        self.phase = LIVE
        loop = self.loop

        def ran(_: Any) -> None:  # on the thread, once the run has ended
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self.stop, ENDED)

        running.add_done_callback(ran)
        try:
            await self.driver.run(self._committed)
        except BaseException:
            self._halt()
            await ended(running)
            raise
        finally:
            self.phase = OVER
        if not running.done():  # stopped from outside, and its calls wound down
            self._halt()
            await ended(running)
        return running.result()

    def _halt(self) -> None:
        """End the program's run now: the worker is killed (a resume ends at once), the
        thread stops waiting on calls, and the started nested calls are cancelled."""
        self._kill()
        with self.turn:
            self.halted = True
            self.turn.notify()
        self.driver.cancel(self._overran_reason() if self.overran else "cancelled")

    def _overrun(self) -> None:
        """On the loop, at ``max_duration``: the program is halted, its started calls
        cancelled (they commit before ``run_code`` returns)."""
        self.overran = True
        self.driver.close_feed()  # calls not started are dropped
        self._halt()

    def _committed(self, index: int, result: ToolResult) -> None:
        self.results[index] = result
        self._settle(self.ids[index], self._outcome(index))

    def _settle(self, call_id: int, outcome: Any) -> None:
        """Tell the program's thread what the sandbox's call ``call_id`` resolves to."""
        with self.turn:
            self.settled[call_id] = outcome
            self.turn.notify()

    def _submit_all(self) -> None:
        """On the loop: the calls the program's thread has handed over, in its order."""
        with self.turn:
            calls, self.outbox = self.outbox, []
            self.handed = False
        for call in calls:
            self._submit(*call)

    def _submit(self, call_id: int, number: int, name: str, args: Any, awaited: bool) -> None:
        """On the loop: the program's call ``call_id`` (its ``number``-th, within
        ``max_calls``) of ``name``, submitted to the driver. ``awaited``: the program is
        blocked on it (it submits nothing until the call commits)."""
        if self.stopping is not None or self.halted:  # stopped while it was on its way
            self._settle(call_id, {"exception": RuntimeError("run_code was cancelled")})
            return
        ctx = self.ctx
        try:
            call = ToolCall(call_id=f"{ctx.call_id}.{number}", name=name, arguments=args,
                            scope=ctx.scope, parent=ctx.token, signal=ctx.signal)
            self.driver.submit(call, ctx.scope, awaited=awaited)
        except Exception as exc:  # a defect: run_code fails with it, the thread stops
            self.failure = exc
            self._halt()
            return
        self.names.append(name)
        self.ids.append(call_id)

    async def _program(self, pool: SandboxPool, sdk: str, code: str) -> Any:
        """Run the program; its ``ToolOutput``, or the exception ``run_code`` raises."""
        import pydantic_monty as pm

        settings = self.settings
        logs = pm.CollectString(max_bytes=settings.max_output_bytes)
        tools = _tools(self.methods)
        # A program checked against this very SDK before passes again: the check is a
        # pure function of the two (``TypeChecked``).
        known = settings.type_check and pool.checked.knows(sdk, code)
        try:
            async with pool.session(sdk, settings, known) as session:
                self.pid = session.worker_pid
                # The sandbox's own limit counts its execution only: this one bounds the
                # program's whole time, its waits on nested calls included.
                self.timers.append(self.loop.call_later(settings.max_duration, self._overrun))
                try:
                    output = await self._step(pool.call(
                        self._run, session, code, tools, logs, known, pm))
                finally:
                    if self.parsed and settings.type_check and not known:
                        pool.checked.add(sdk, code)  # it parsed and passed its check
        except (pm.MontyError, _Halted) as exc:
            if self.failure is not None:  # halted by a defect: run_code fails with it
                raise self.failure from None
            if self.stopping not in (None, ENDED):  # halted once stopped: run_code aborts
                return None
            if self.overran:
                return self._overran(logs.output)
            if isinstance(exc, _Halted):  # (halted, not cancelled: only by a defect)
                raise
            return self._failed(exc, logs.output, pm)
        if self.overran:  # (its run ended as the deadline came: its calls were cancelled)
            return self._overran(logs.output)
        if self.over_calls:
            return _failure("call-limit", f"the program made more than {settings.max_calls} "
                            "tool calls", logs.output, None)
        return self._success(output, logs.output)

    def _run(self, session: Any, code: str, tools: Any, logs: Any, known: bool,
             pm: Any) -> Any:
        """On the program's thread: run the program to its end; its output."""
        snapshot = session.feed_start(code, inputs={"tools": tools}, print_callback=logs,
                                      skip_type_check=known)
        self.parsed = True
        while not isinstance(snapshot, pm.MontyComplete):
            snapshot = self._answer(snapshot, pm)
        return snapshot.output

    def _answer(self, snapshot: Any, pm: Any) -> Any:
        """On the program's thread: the program resumed after ``snapshot``."""
        if isinstance(snapshot, pm.FunctionSnapshot):
            name = snapshot.function_name
            if snapshot.is_os_function:  # (asyncio.sleep, say: the held calls start)
                self._flush()
                return self._os_call(snapshot, name)
            if snapshot.object_id is None or not (name in self.methods or name == "call"):
                return snapshot.resume(
                    {"exception": NameError(f"name {name!r} is not defined")})
            if self.stopping is not None:
                return snapshot.resume(
                    {"exception": RuntimeError("run_code was cancelled")})
            args = list(snapshot.args)
            kwargs = dict(snapshot.kwargs)
            if name == "call":
                tool = args.pop(0) if args else kwargs.pop("name", None)
                if not isinstance(tool, str):
                    return snapshot.resume(
                        {"exception": TypeError("tools.call() takes a tool name")})
                name = tool
            if name == RUN_CODE:  # a worker held per level: nesting could starve the pool
                return snapshot.resume({"exception": RuntimeError(error_text(
                    RUN_CODE, "UNKNOWN_TOOL", f"a {RUN_CODE} program cannot run another program"))})
            if self.calls >= self.settings.max_calls:
                self.over_calls = True  # the call is never submitted
                return snapshot.resume({"exception": RuntimeError(
                    f"call limit reached: a program may make at most "
                    f"{self.settings.max_calls} tool calls")})
            payload = args[0] if args else kwargs.get("args", {})
            self.calls += 1
            call_id = snapshot.call_id
            self.pending.add(call_id)
            self.called[call_id] = name
            awaited = snapshot.allow_eager_await
            with self.turn:
                self.outbox.append((call_id, self.calls, name, payload, awaited))
                held = len(self.outbox)
            # A call the program does not await at once is held until the program waits
            # (or ``max_parallel`` are held): a gather's calls then reach the loop in one
            # hand-over, after the program's turns, which the loop's work would slow down
            # (both need the interpreter's lock). Handed over before the answer travels
            # to the worker, an awaited call starts as the program reaches its await.
            if awaited or held >= self.settings.max_parallel:
                self._flush()
            return snapshot.resume({"future": ...})
        self._flush()  # the program waits, or may run on for long: the held calls start
        if isinstance(snapshot, pm.FutureSnapshot):
            return snapshot.resume(self._wait(snapshot.pending_call_ids))
        return snapshot.resume_auto()  # a name lookup: the sandbox's own NameError

    def _os_call(self, snapshot: Any, name: str) -> Any:
        """On the program's thread: the program resumed after a call of the sandbox's
        OS layer. The synchronous API leaves sleeping to the host: ``asyncio.sleep`` is
        a future the loop settles when its time is up, ``time.sleep`` a wait here
        (which a halt ends); everything else is refused as the sandbox refuses it."""
        if name not in (_ASYNC_SLEEP, _SLEEP):
            return snapshot.resume_not_handled()
        delay = snapshot.args[0] if snapshot.args else 0
        seconds = min(float(delay), _LONGEST) if type(delay) in (int, float) else 0.0
        seconds = seconds if seconds > 0 else 0.0  # (NaN too: asyncio.sleep's own reading)
        if name == _ASYNC_SLEEP:
            self._hand_over(self._sleep, snapshot.call_id, seconds)
            return snapshot.resume({"future": ...})
        until = time.monotonic() + seconds
        with self.turn:  # in slices, to stop if the loop that would halt it is closed
            while not self.halted and (left := until - time.monotonic()) > 0:
                self.turn.wait(min(left, _LOOK))
                if self.loop.is_closed():
                    break
            if self.halted or self.loop.is_closed():
                raise _Halted
        return snapshot.resume({"return_value": None})

    def _sleep(self, call_id: int, seconds: float) -> None:
        """On the loop: settle the program's ``asyncio.sleep`` ``call_id`` in ``seconds``
        (the timer is cancelled if the program ends first)."""
        if self.stopping is None:
            self.timers.append(self.loop.call_later(
                seconds, self._settle, call_id, {"return_value": None}))

    def _flush(self) -> None:
        """On the program's thread: hand the held calls to the loop, unless it has yet to
        take earlier ones (it takes these with them)."""
        with self.turn:
            if not self.outbox or self.handed:
                return
            self.handed = True
        self._hand_over(self._submit_all)

    def _hand_over(self, callback: Callable[..., object], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: nothing will commit the call
            raise _Halted from None

    def _wait(self, wanted: list[int]) -> dict[int, Any]:
        """On the program's thread: the settled calls among ``wanted``, once there is one
        (the program awaits them: ``asyncio.gather`` waits for all, in any order)."""
        with self.turn:
            while True:
                ready = {i: self.settled.pop(i) for i in wanted if i in self.settled}
                if ready:
                    self.pending.difference_update(ready)
                    return ready
                if self.halted or (not self.turn.wait(_LOOK) and self.loop.is_closed()):
                    raise _Halted

    def _outcome(self, index: int) -> Any:
        """What the sandbox is told of committed call ``index``."""
        result = self.results[index]
        if not result.is_error:
            value = thaw(result.value)
            if type(value) is str and _COROUTINE.fullmatch(value):
                self.lookalikes.add(value)  # a result holding it is no call left un-awaited
            return {"return_value": value}
        info = result.error
        assert info is not None
        return {"exception": RuntimeError(error_text(self.names[index], info.code, info.message))}

    def _success(self, output: Any, logs: str) -> Any:
        value: dict[str, Any] = {"logs": logs}
        text = logs
        # The sandbox's output is the last statement's value when that is an expression,
        # else None; None shows nothing, as in a REPL.
        if output is not None:
            limit = self.settings.max_output_bytes
            over = _scan(output, limit - len(logs.encode()), self._unawaited)  # uncopied
            if over is _DEEP:
                return _failure("runtime", f"the program's result nests deeper than {_DEPTH} "
                                "levels of arrays and objects", logs, None)
            if over is _OVER:
                return _failure("output-limit", "captured output and result exceed "
                                f"{limit} bytes", logs, None)
            if isinstance(over, int):
                return _failure("runtime", "a tool call was not awaited: the program's result "
                                f'holds the call of "{self.called[over]}" instead of its '
                                "value; await every call (await tools.<name>(...), or "
                                "await asyncio.gather(...) for several)", logs, None)
            try:
                frozen = snapshot_json(output)
            except ValueError as exc:
                return _failure("runtime", f"the program's result is not lossless JSON: {exc}",
                                logs, None)
            value["result"] = thaw(frozen)
            rendered = json.dumps(value["result"], ensure_ascii=False)
            if len(logs.encode()) + len(rendered.encode()) > limit:
                return _failure("output-limit", "captured output and result exceed "
                                f"{limit} bytes", logs, None)
            text = (text if not text or text.endswith("\n") else text + "\n") + \
                f"result: {rendered}"
        content = text or "(run_code completed with no output)"
        return ToolOutput(value=value, content=[TextContent(content)])

    def _unawaited(self, text: str) -> int | None:
        """The sandbox's id of the call whose coroutine ``text`` is the repr of, if any:
        one still pending, or one whose value did not read the same."""
        match = _COROUTINE.fullmatch(text)
        if match is None:
            return None
        call = int(match.group(1))
        if call in self.pending or (call in self.called and text not in self.lookalikes):
            return call
        return None

    def _failed(self, exc: Exception, logs: str, pm: Any) -> CodeFailedError:
        type_name = type(exc).__name__
        limit = self.settings.max_output_bytes
        if isinstance(exc, pm.MontySyntaxError):
            return _failure("syntax", _clip(exc.display("type-msg"), limit), logs, type_name)
        if isinstance(exc, pm.MontyTypingError):
            diagnostics = _clip(exc.display().strip(), limit)
            # The checker parses first: a program that does not parse is a syntax failure.
            kind = "syntax" if "error[invalid-syntax]" in diagnostics else "type"
            return _failure(kind, diagnostics, logs, type_name)
        if isinstance(exc, pm.MontyCrashedError):
            return _failure("crashed", _clip(str(exc), limit), logs, type_name)
        if self.over_calls:
            return _failure("call-limit", f"the program made more than "
                            f"{self.settings.max_calls} tool calls", logs, type_name)
        # Each of these is a copy of the program's exception message, which may be as
        # large as its memory: one at a time, each clipped at once.
        kind = _kind(_inner(exc))
        if not isinstance(exc, pm.MontyRuntimeError):
            message = _clip(str(exc), limit)
        elif kind == "runtime":
            message = _clip(exc.display("traceback").strip(), limit)
        else:
            message = _clip(exc.display("type-msg"), limit)
        if kind == "memory" and message.endswith(f"> {limit} bytes") and (
                limit != self.settings.max_memory):
            kind = "output-limit"
        return _failure(kind, message, logs, type_name)

    def _overran_reason(self) -> str:
        return f"the program ran longer than max_duration ({self.settings.max_duration:g} s)"

    def _overran(self, logs: str) -> CodeFailedError:
        """The program ran past ``max_duration`` (waiting on nested calls, say): it was
        halted, its started calls cancelled (``_overrun``); they have committed."""
        return _failure("timeout", f"{self._overran_reason()} of wall time, waits on tool "
                        "calls included", logs, None)

    def _forward(self) -> None:
        """Nested results' contexts (and successful images) to run_code, in order."""
        ctx = self.ctx
        for index in sorted(self.results):
            result = self.results[index]
            for message in result.contexts:
                ctx.defer_context(message)
            if not result.is_error:
                images = tuple(c for c in result.content if isinstance(c, ImageContent))
                if images:
                    ctx.defer_context(ContextMessage(images, self.names[index]))
            if result.concludes_turn:
                ctx.conclude_turn()


class _Tools:
    """The host object behind the program's ``tools``. Its methods are never called:
    each call the program makes suspends it, and ``_Program._answer`` answers."""

    __slots__ = ()


@functools.lru_cache(maxsize=64)
def _tools(methods: frozenset[str]) -> Any:
    """The program's ``tools``: one wrapper per set of methods, sent to every session
    (it holds no state; built per program, its uuid and policies cost 40 µs on a cold
    start)."""
    import pydantic_monty as pm

    return pm.ClassInstance(_Tools(), allowed_methods={*methods, "call"})


def _inner(exc: Exception) -> BaseException | None:
    try:
        return exc.exception()  # type: ignore[attr-defined,no-any-return]
    except Exception:
        return None


def _kind(inner: BaseException | None) -> str:
    if isinstance(inner, TimeoutError):
        return "timeout"
    if isinstance(inner, MemoryError):
        return "memory"
    return "runtime"


def _clip(message: str, limit: int) -> str:
    """``message``, cut to at most ``limit`` bytes of UTF-8 (and a note naming the limit)."""
    if len(message) <= limit // 4 or (len(message) <= limit and
                                      len(message.encode()) <= limit):
        return message
    note = f" ... [cut: the message is over max_output_bytes ({limit} bytes)]"
    head = message[:limit].encode()[:max(limit - len(note), 0)]
    return head.decode(errors="ignore") + note


_DEEP: Final = object()  # what _scan finds
_OVER: Final = object()


def _scan(value: Any, budget: int, unawaited: Callable[[str], int | None]) -> object:
    """Why the program's result cannot be returned, found before it is copied: ``_DEEP``
    (it nests deeper than ``_DEPTH``), the sandbox's id of a call whose coroutine it
    holds (``unawaited``), ``_OVER`` when its JSON is surely over ``budget`` bytes (each
    string counted by its length, never encoded); else ``None``. The walk is iterative,
    so any depth is safe to look at."""
    size = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        cls = type(item)
        if cls is str:
            size += len(item) + 2
            if item.startswith("<coroutine external_future(") and (
                    call := unawaited(item)) is not None:
                return call
        elif cls is list or cls is tuple or cls is dict:
            if depth == _DEPTH:
                return _DEEP
            size += 2 + len(item)
            if size > budget:
                return _OVER
            if cls is dict:
                stack.extend((key, depth + 1) for key in item)
                stack.extend((sub, depth + 1) for sub in item.values())
            else:
                stack.extend((sub, depth + 1) for sub in item)
        else:
            size += 1
        if size > budget:
            return _OVER
    return None
