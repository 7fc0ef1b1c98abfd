"""The registry's sandbox pool: ``pydantic_monty`` workers, the warm spare sessions
programs start in, and the programs running on them (code-mode.md, "Running a program",
item 1: a fresh session per call).

The pool drives the sandbox through its synchronous API (``pydantic_monty.Monty``), each
operation (starting the workers, a checkout, a feed, a program's run, closing a session
or the pool) on a thread of the pool's own executor: a blocking sandbox call releases
the interpreter's lock while the worker computes, so the event loop runs meanwhile, and
a program's run is one operation whose thread answers its suspensions itself (a turn of
the worker costs about a third of what a turn through ``AsyncMonty``'s futures does).
An operation cannot be interrupted from outside its thread, so none is abandoned:
``settle`` waits for each to end, whatever cancellation comes meanwhile (a program's
worker is killed first, so that its run ends at once), and checkouts never queue inside
the sandbox (the pool's own slots do, where waiting can be cancelled). The executor's
threads are the interpreter's own, which it joins before it finalizes: no sandbox call
is still running when the process exits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import select
import signal as signals
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from .._model.errors import ToolAbortedError
from ._sdk import PRELUDE

if TYPE_CHECKING:
    from ._settings import CodeSettings

__all__ = ["SandboxPool", "alive", "ended", "settle"]

T = TypeVar("T")

_PRELUDE: Final = PRELUDE  # ToolCallError and tool_call_error, as the SDK declares them
# Fed to a spare session: it runs nothing (``if False``) and defines nothing, but its
# type check loads the stubs a program's check needs (names kept out of programs' way).
_WARM_UP: Final = """\
if False:
    import asyncio as __toolrail_asyncio
    __toolrail_value = await tools.call("warm-up", {})
    await __toolrail_asyncio.gather(tools.call("warm-up", {}))
    __toolrail_items = [str(i).strip().split() for i in range(1) if i]
    print(len(__toolrail_items), {"a": 1}.get("a"), sorted([1]), __toolrail_value)
"""
_CLOSED: Final = "tool call aborted: the registry is closing"
_SPARES: Final = 2  # warm spare sessions at most, each holding a worker
_CHECKED: Final = 1024  # (SDK, program) pairs remembered as type-checked
_EXIT_GRACE: Final = 2.0  # seconds a closed pool's worker has to exit before a SIGKILL
# Seconds a program's session waits, on its pool thread, before it is closed: closing a
# type-checked session holds the interpreter's lock for 1-4 ms (pydantic-monty 1.4 drops
# its in-process checker then), which would stall the event loop while ``run_code``'s
# result is still on its way to the caller (0.3-1 ms after the program ends).
_CLOSE_DELAY: Final = 0.005
_DEATH_POLL: Final = 0.002  # seconds between looks at a worker, where there is no pidfd


class Running(Protocol):
    """A program the pool runs (``_runtime._Program``), as ``close()`` stops it."""

    @property
    def done(self) -> asyncio.Event: ...

    @property
    def pid(self) -> int | None: ...  # its worker's, once it has one

    def stop(self, reason: str) -> None: ...


class TypeChecked:
    """The (SDK, program) pairs that passed the sandbox's type check, the newest
    ``_CHECKED`` of them. A session type-checks a feed against the SDK's stubs and what
    it ran before, which is the same prelude (and warm-up) in every session: the verdict
    depends on the two texts alone, so a program an agent sends again (a retry, a loop's
    next turn, the same program in another step) skips the 3-20 ms the checker takes.
    Kept as digests: a program text is not held once its run is over."""

    __slots__ = ("_digests",)

    def __init__(self) -> None:
        self._digests: dict[bytes, None] = {}  # oldest first

    def knows(self, sdk: str, code: str) -> bool:
        key = _digest(sdk, code)
        if key in self._digests:
            self._digests[key] = self._digests.pop(key)  # the newest now
            return True
        return False

    def add(self, sdk: str, code: str) -> None:
        self._digests[_digest(sdk, code)] = None
        while len(self._digests) > _CHECKED:
            del self._digests[next(iter(self._digests))]


def _digest(sdk: str, code: str) -> bytes:
    return hashlib.blake2b(f"{len(sdk)}:{sdk}{code}".encode(), digest_size=16).digest()


class SandboxPool:
    """The registry's ``pydantic_monty`` worker pool, its warm spare sessions, and the
    programs running on them.

    The sandbox's type checker loads its standard-library stubs in each session, on the
    session's first checked feed: 15-20 ms, most of a checked program's fixed cost. So
    once a program has run, the pool warms a *spare* session for the same SDK and
    settings in the background (checked out, the prelude fed and, when programs are
    type-checked, a snippet that runs nothing but makes the checker load what programs
    use), and the next program with that key takes it, waiting for the warm-up if it is
    still going. A spare has run no program, so it is still a fresh session in the
    sense of code-mode.md: nothing carries from one ``run_code`` to the next. At most
    ``_SPARES`` spares exist (the oldest key gives way), each holding one worker, and
    the pool may grow by that many workers so that spares never starve a program.

    Each session holds one of the pool's slots, as many as the sandbox has workers, from
    before its checkout until it is closed: a checkout is asked for only when a worker
    is free, so it never waits inside the sandbox, where a wait could not be cancelled.
    The workers start on demand (``min_processes=0``), so every one is seen at its first
    checkout: the pool keeps a pidfd of each (where the platform has them), kills its
    own workers through it, and ``close()`` returns only once every one has exited.
    """

    def __init__(self) -> None:
        self._monty: Any = None
        self._threads: ThreadPoolExecutor | None = None  # where every sandbox call runs
        self._starting: asyncio.Lock | None = None
        self.checked = TypeChecked()  # programs that passed their type check
        self.running: set[Running] = set()  # the programs running now (``_runtime`` adds them)
        self._spares: dict[Any, asyncio.Task[Any]] = {}  # by key, oldest first
        self._closing: set[asyncio.Future[Any]] = set()  # sessions being closed
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the spares live on
        self._closed = False
        self._size = (os.cpu_count() or 1) + _SPARES  # the sandbox's workers, at most
        self._slots: asyncio.Semaphore | None = None  # one per session; of ``_loop``
        self._holding: dict[int, asyncio.Semaphore] = {}  # id(session) -> its slot's
        self._workers: dict[int, int | None] = {}  # every worker seen: pid -> its pidfd

    async def start(self) -> None:
        if self._closed:
            raise ToolAbortedError(_CLOSED)
        if self._monty is not None:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._monty is None and not self._closed:
                import pydantic_monty

                monty = pydantic_monty.Monty(min_processes=0, max_processes=self._size)
                if self._threads is None:  # a session at a time per thread, at most
                    self._threads = ThreadPoolExecutor(self._size + 1,
                                                       thread_name_prefix="toolrail-sandbox")
                await settle(self.call(monty.__enter__))
                if self._closed:  # aclose() came while the workers started: stop them
                    await settle(self.call(monty.__exit__, None, None, None))
                else:
                    self._monty = monty
        if self._monty is None:
            raise ToolAbortedError(_CLOSED)

    def call(self, operation: Callable[..., T], *args: Any,
             **kwargs: Any) -> concurrent.futures.Future[T]:
        """``operation(*args, **kwargs)`` (a blocking sandbox call) on one of the pool's
        threads; await it with ``settle`` (or ``ended``)."""
        assert self._threads is not None
        return self._threads.submit(operation, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def session(self, sdk: str, settings: CodeSettings,
                      checked: bool = False) -> AsyncIterator[Any]:
        """A fresh session for one program, its prelude fed: a warm spare when one is
        ready (or warming) for this SDK and these settings, else a new checkout.

        ``checked``: the program passed its type check before (``TypeChecked``), so it
        needs no warm checker: it does not wait for a spare still warming, and a new
        session feeds the warm-up unchecked (the same feeds, without their cost)."""
        options: dict[str, Any] = {
            "limits": {"max_feed_duration_secs": settings.max_duration,
                       "max_memory": settings.max_memory,
                       "max_suspensions": 4 * settings.max_calls + 1000},
            "type_check": settings.type_check, "type_check_stubs": sdk,
            "type_check_format": "concise"}
        if self._closed or self._monty is None:
            raise ToolAbortedError(_CLOSED)
        key = (sdk, settings)
        self._settle_loop()
        spare = await self._take(key, wait=not checked)
        closed = None
        try:
            session = spare if spare is not None else await self._open(options, checked)
            try:
                yield session
            finally:
                # Closed in the background: the program has ended (a stopped one's worker
                # was killed; run_code waits for it to exit), and a session takes
                # 0.3-2.5 ms to close (a type-checked one the most), which its result
                # need not wait for; the close begins once the result is on its way
                # (``_CLOSE_DELAY``). Its slot is held until it is closed; ``close()``
                # waits for it.
                closed = self._close_later(session, _CLOSE_DELAY)
        finally:
            # For the next program with this key, warmed once this one is over (while
            # the model reads its result) so that it never competes with it for the CPU:
            # its warm-up begins once this program's session is closed, which follows
            # the call's end.
            self._warm_spare(key, options, after=closed)

    async def _take(self, key: Any, wait: bool = True) -> Any:
        """The spare for ``key`` once warm, if there is one and its worker lives (and,
        unless ``wait``, only if it is warm already: one still warming stays a spare)."""
        task = self._spares.get(key)
        if task is None or (not wait and not task.done()):
            return None
        del self._spares[key]
        try:
            # (A warm one is taken at once: no wait, so no turn of the event loop.)
            spare = task.result() if task.done() else await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return None  # the warm-up was cancelled, not the program: no spare
            if not task.cancelled():
                self._keep(key, task)  # the program was cancelled: the spare serves another
            raise
        if spare is not None and not self._lives(spare.worker_pid):
            await self._exit(spare)  # its worker is gone: the pool replaces it
            return None
        return spare

    def _lives(self, pid: int | None) -> bool:
        """Whether this pool's worker ``pid`` has not exited: a poll of its pidfd (one
        system call, on every program's path), else a look at /proc (``alive``)."""
        return pid is not None and not _exited(pid, self._workers.get(pid))

    def _warm_spare(self, key: Any, options: dict[str, Any],
                    after: asyncio.Future[None] | None = None) -> None:
        if not self._closed and key not in self._spares:
            self._keep(key, asyncio.get_running_loop().create_task(self._warm(options, after)))

    def _keep(self, key: Any, task: asyncio.Task[Any]) -> None:
        if key in self._spares or self._closed:
            task.add_done_callback(self._discard)
            task.cancel()
            return
        self._spares[key] = task
        while len(self._spares) > _SPARES:
            oldest = next(iter(self._spares))
            evicted = self._spares.pop(oldest)
            evicted.add_done_callback(self._discard)
            evicted.cancel()

    def _discard(self, task: asyncio.Task[Any]) -> None:
        """A spare no longer wanted, once its warm-up has stopped: its session is closed."""
        if task.cancelled() or task.exception() is not None or task.result() is None:
            return
        self._close_later(task.result())

    def _close_later(self, session: Any, delay: float = 0.0) -> asyncio.Future[None]:
        """Close ``session`` on a pool thread, handed over at once (no turn of the event
        loop, no task) and begun there after ``delay`` seconds; its slot is given back,
        and the future returned set, once it is closed (or failed to close: its worker
        died, and it is the sandbox's to reap). A close that has not ended within
        ``_EXIT_GRACE`` waits on a worker that does not answer: the worker is killed."""
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        self._closing.add(closed)
        timer = loop.call_later(delay + _EXIT_GRACE, self._kill_all, [session.worker_pid])

        def done() -> None:
            timer.cancel()
            self._release(session)
            self._closing.discard(closed)
            if not closed.done():
                closed.set_result(None)

        def finished(_: concurrent.futures.Future[Any]) -> None:  # on the closing thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to tell
                loop.call_soon_threadsafe(done)

        self.call(_close, session, delay).add_done_callback(finished)
        return closed

    def _settle_loop(self) -> None:
        """Spares belong to the event loop that warmed them. A registry used from a new
        loop (a second ``asyncio.run``) forgets the old loop's: a warm-up that loop
        cancelled when it ended is no spare, and one that finished is closed here. The
        slots are the loop's too (an asyncio semaphore serves one loop)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        self._slots = asyncio.Semaphore(self._size)
        stale = list(self._spares.values())
        self._spares.clear()
        self._closing.clear()  # futures of the old loop: nothing here can wait for them
        for task in stale:
            if task.done():
                self._discard(task)

    async def _warm(self, options: dict[str, Any], after: asyncio.Future[None] | None) -> Any:
        """A spare session, warmed once ``after`` is done; ``None`` if it could not be
        warmed (programs then check out)."""
        try:
            if after is not None:
                await asyncio.wait((after,))  # (cancelled, this task leaves ``after`` be)
            return await self._open(options)
        except Exception:
            return None

    async def _open(self, options: dict[str, Any], checked: bool = False) -> Any:
        """A session ready for a program, spare or not: checked out, the prelude fed and,
        when programs are type-checked, the warm-up. The same feeds either way, so a
        program is the same feed of its session (``<python-input-N>`` in its traceback)
        whichever it gets."""
        slots = self._slots
        assert slots is not None
        await slots.acquire()  # cancellable: nothing of the sandbox waits yet
        try:
            if self._monty is None:
                raise ToolAbortedError(_CLOSED)
            session = self._monty.checkout(**options)
        except BaseException:
            slots.release()
            raise
        self._holding[id(session)] = slots  # given back when the session is closed

        async def given_back(_: Any) -> None:  # checked out after all: its worker is ours
            self._seen(session.worker_pid)
            await self._exit(session)

        try:
            # One operation on a thread (the event loop takes no turn between its steps).
            # Cancelled meanwhile, it still completes: its session is closed.
            failed = await settle(self.call(_prepare, session, options["type_check"], checked),
                                  late=given_back)
        except BaseException:
            self._release(session)  # the checkout failed: there is no session to close
            raise
        self._seen(session.worker_pid)
        if failed is not None:
            await self._exit(session)
            raise failed
        return session

    async def _exit(self, session: Any) -> None:
        """Close a session and give back its slot (``_close_later``), awaited to its end
        whatever cancellation comes meanwhile (raised once it has)."""
        await ended(self._close_later(session))

    async def _bounded(self, closing: concurrent.futures.Future[T],
                       pids: list[int | None]) -> T:
        """Closing the pool, awaited to its end. Closing waits for workers to answer:
        one that has not ended within ``_EXIT_GRACE`` waits on a worker that does not
        (stopped, or wedged), so ``pids`` are killed, which ends it."""
        loop = asyncio.get_running_loop()
        timer = loop.call_later(_EXIT_GRACE, self._kill_all, pids)
        try:
            return await settle(closing)
        finally:
            timer.cancel()

    def _kill_all(self, pids: list[int | None]) -> None:
        for pid in pids:
            if pid is not None:
                self.kill(pid)

    def _release(self, session: Any) -> None:
        slots = self._holding.pop(id(session), None)
        if slots is not None:
            slots.release()

    def _seen(self, pid: int | None) -> None:
        """Keep a pidfd of a worker met at a checkout (and forget those that exited)."""
        if pid is None or pid in self._workers:
            return
        for old, fd in list(self._workers.items()):
            if _exited(old, fd):
                del self._workers[old]
                if fd is not None:
                    os.close(fd)
        self._workers[pid] = _pidfd(pid)

    def kill(self, pid: int) -> bool:
        """SIGKILL this pool's worker ``pid`` if it still runs; whether it was sent.
        Called while a session still holds the worker, so the pid is still its own; the
        pidfd makes sure of it (and the sandbox replaces the worker)."""
        fd = self._workers.get(pid)
        try:
            if fd is not None:
                signals.pidfd_send_signal(fd, signals.SIGKILL)
                return True
            if alive(pid):
                os.kill(pid, signals.SIGKILL)
                return True
        except ProcessLookupError:
            pass
        return False

    async def exited(self, pid: int, seconds: float) -> bool:
        """Wait until this pool's worker ``pid`` has exited (a zombie has: reaping it is
        the sandbox's), on its pidfd where there is one; whether it did in ``seconds``."""
        return await _wait_exit(pid, self._workers.get(pid), seconds)

    async def ready(self) -> None:
        """Wait until the spares being warmed are warm (or failed to warm) and the
        sessions being closed are closed: for the benchmarks and tests, which time or
        check a program that finds the pool at rest, as a model's next step does."""
        self._settle_loop()
        while True:  # (a session's close is followed by its spare's warm-up)
            busy: list[asyncio.Future[Any]] = [*self._closing]
            busy += (task for task in self._spares.values() if not task.done())
            if not busy:
                return
            await asyncio.wait(busy)

    async def close(self) -> None:
        """Cancel the running programs, wait for them, then stop the spares and workers,
        and wait for every worker process to exit."""
        self._closed = True
        self._settle_loop()
        programs = list(self.running)
        for program in programs:
            program.stop("the registry is closing")
        for program in programs:
            await program.done.wait()
        spares = list(self._spares.values())
        self._spares.clear()
        for task in spares:
            task.cancel()
        if spares:
            await asyncio.wait(spares)
        for task in spares:
            if not task.cancelled() and task.exception() is None and task.result() is not None:
                await self._exit(task.result())
        if self._closing:
            await asyncio.wait(list(self._closing))
        if self._starting is not None:
            async with self._starting:  # a start under way sees ``_closed``, and undoes itself
                pass
        monty, self._monty = self._monty, None
        try:
            if monty is not None:
                await self._bounded(self.call(monty.__exit__, None, None, None),
                                    list(self._workers))
        finally:
            await self._all_exited()
            if self._threads is not None:  # every sandbox call has ended by now
                self._threads.shutdown(wait=False)

    async def _all_exited(self) -> None:
        """Wait for every worker the pool met to exit: the sandbox asks them to, without
        waiting. One that has not within ``_EXIT_GRACE`` is killed (only through its
        pidfd: without one, the pid might be another process's by now)."""
        workers, self._workers = self._workers, {}
        for pid, fd in workers.items():
            try:
                if not await _wait_exit(pid, fd, _EXIT_GRACE) and fd is not None:
                    with contextlib.suppress(ProcessLookupError):
                        signals.pidfd_send_signal(fd, signals.SIGKILL)
                    await _wait_exit(pid, fd, _EXIT_GRACE)
            finally:
                if fd is not None:
                    os.close(fd)


def _close(session: Any, delay: float) -> None:
    """On a pool thread: close ``session`` after ``delay`` seconds (a sleep, which holds
    no lock: the interpreter joins this thread before it finalizes, so the close still
    happens if the event loop ends meanwhile)."""
    if delay:
        time.sleep(delay)
    session.__exit__(None, None, None)


def _prepare(session: Any, warm_up: bool, checked: bool) -> Exception | None:
    """On a pool thread: check ``session`` out, then feed it the prelude and, when
    programs are type-checked, the warm-up (unchecked for a program checked before);
    the exception of a feed that failed (the session is checked out all the same)."""
    session.__enter__()
    try:
        session.feed_run(_PRELUDE, skip_type_check=True)
        if warm_up:
            session.feed_run(_WARM_UP, skip_type_check=checked)
    except Exception as exc:
        return exc
    return None


async def settle(running: concurrent.futures.Future[T], *,
                 on_cancel: Callable[[], object] | None = None,
                 late: Callable[[T], Awaitable[object]] | None = None) -> T:
    """Await a sandbox call on a pool thread (``SandboxPool.call``) to its end, even
    when the wait is cancelled.

    A sandbox call cannot be stopped from outside its thread, and one left running would
    use a session, or a worker, that its caller has moved on from (closed, given back,
    or handed to the next program). So on a cancellation, ``on_cancel``
    runs (it makes the call end now: a program's worker is killed), the call is awaited
    to its end, ``late`` gets its result if it succeeded all the same (a checkout's
    session is closed), and then the cancellation goes on. Nothing here cancels the
    call: one still queued for a thread runs all the same (a close that never ran would
    leave its session checked out, and its slot given back)."""
    try:
        await asyncio.wait((_observed(running),))  # (which cancels nothing it waits on)
    except asyncio.CancelledError:
        if on_cancel is not None and not running.done():
            on_cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ended(running)
        if running.exception() is None and late is not None:
            await late(running.result())
        raise
    return running.result()


async def ended(done: concurrent.futures.Future[Any] | asyncio.Future[Any]) -> None:
    """Wait until a call on a pool thread (or a session's close) has ended, whatever
    cancellation comes meanwhile (raised once it has: the wait is bounded by its end)."""
    cancelled = False
    while not done.done():
        waiting = _observed(done) if isinstance(done, concurrent.futures.Future) else done
        try:
            await asyncio.wait((waiting,))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _observed(running: concurrent.futures.Future[T]) -> asyncio.Future[T]:
    """An asyncio future that ends with ``running`` (whose outcome is read from it)."""
    observed = asyncio.wrap_future(running)
    observed.add_done_callback(_retrieved)
    return observed


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3+), else ``None`` (the pool then polls)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        return int(pidfd_open(pid))
    except OSError:
        return None


def _exited(pid: int, fd: int | None) -> bool:
    if fd is None:
        return not alive(pid)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))  # a pidfd is readable once its process has exited


async def _wait_exit(pid: int, fd: int | None, seconds: float) -> bool:
    """Wait until ``pid`` has exited, for at most ``seconds``; whether it did."""
    if _exited(pid, fd):
        return True
    loop = asyncio.get_running_loop()
    if fd is not None:
        readable = loop.create_future()
        try:
            loop.add_reader(fd, _ready, readable)
        except NotImplementedError:  # a loop without readers (Windows has no pidfd anyway)
            pass
        else:
            try:
                await asyncio.wait((readable,), timeout=seconds)
            finally:
                loop.remove_reader(fd)
            return _exited(pid, fd)
    deadline = loop.time() + seconds
    while not _exited(pid, fd):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_DEATH_POLL)
    return True


def _ready(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def alive(pid: int | None) -> bool:
    """Whether a worker still runs (a killed one the pool has not yet reaped is a
    zombie, which ``kill(pid, 0)`` alone would take for alive)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b") ", 1)[-1][:1] not in (b"Z", b"X")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False  # procfs, and no such process
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True
