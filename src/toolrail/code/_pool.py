"""The registry's sandbox pool: ``pydantic_monty`` workers, the warm spare sessions
programs start in, and the programs running on them (code-mode.md, "Running a program",
item 1: a fresh session per call)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._model.errors import ToolAbortedError
from ._sdk import PRELUDE

if TYPE_CHECKING:
    from ._settings import CodeSettings

__all__ = ["SandboxPool", "alive"]

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
    programs running on it.

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
    """

    def __init__(self) -> None:
        self._monty: Any = None
        self._starting: asyncio.Lock | None = None
        self.checked = TypeChecked()  # programs that passed their type check
        self.running: set[Running] = set()  # the programs running now (``_runtime`` adds them)
        self._spares: dict[Any, asyncio.Task[Any]] = {}  # by key, oldest first
        self._closing: set[asyncio.Future[Any]] = set()  # sessions of discarded spares
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the spares live on
        self._closed = False

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

                monty = pydantic_monty.AsyncMonty(max_processes=(os.cpu_count() or 1) + _SPARES)
                await monty.__aenter__()
                if self._closed:  # aclose() came while the workers started: stop them
                    await monty.__aexit__(None, None, None)
                else:
                    self._monty = monty
        if self._monty is None:
            raise ToolAbortedError(_CLOSED)

    @contextlib.asynccontextmanager
    async def session(self, sdk: str, settings: CodeSettings) -> AsyncIterator[Any]:
        """A fresh session for one program, its prelude fed: a warm spare when one is
        ready (or warming) for this SDK and these settings, else a new checkout."""
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
        spare = await self._take(key)
        try:
            session = spare if spare is not None else await _open(self._monty, options)
            try:
                yield session
            finally:
                await session.__aexit__(None, None, None)
        finally:
            # For the next program with this key, warmed once this one is over (while
            # the model reads its result) so that it never competes with it for the CPU.
            self._warm_spare(key, options)

    async def _take(self, key: Any) -> Any:
        """The spare for ``key`` once warm, if there is one and its worker lives."""
        task = self._spares.pop(key, None)
        if task is None:
            return None
        try:
            spare = await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return None  # the warm-up was cancelled, not the program: no spare
            if not task.cancelled():
                self._keep(key, task)  # the program was cancelled: the spare serves another
            raise
        if spare is not None and not alive(spare.worker_pid):
            await _exit(spare)  # its worker is gone: the pool replaces it
            return None
        return spare

    def _warm_spare(self, key: Any, options: dict[str, Any]) -> None:
        if not self._closed and key not in self._spares:
            self._keep(key, asyncio.get_running_loop().create_task(self._warm(options)))

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
        closing = asyncio.ensure_future(_exit(task.result()))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def _settle_loop(self) -> None:
        """Spares belong to the event loop that warmed them. A registry used from a new
        loop (a second ``asyncio.run``) forgets the old loop's: a warm-up that loop
        cancelled when it ended is no spare, and one that finished is closed here."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        stale = list(self._spares.values())
        self._spares.clear()
        self._closing.clear()  # futures of the old loop: nothing here can wait for them
        for task in stale:
            if task.done():
                self._discard(task)

    async def _warm(self, options: dict[str, Any]) -> Any:
        """A spare session; ``None`` if it could not be warmed (programs then check out)."""
        try:
            return await _open(self._monty, options)
        except Exception:
            return None

    async def ready(self) -> None:
        """Wait until the spares being warmed are warm (or failed to warm): for the
        benchmarks and tests, which time or check a program that finds its spare warm."""
        self._settle_loop()
        warming = [task for task in self._spares.values() if not task.done()]
        if warming:
            await asyncio.wait(warming)

    async def close(self) -> None:
        """Cancel the running programs, wait for them, then stop the spares and workers."""
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
                await _exit(task.result())
        if self._closing:
            await asyncio.wait(list(self._closing))
        monty, self._monty = self._monty, None
        if monty is not None:
            await monty.__aexit__(None, None, None)


async def _checkout(monty: Any, options: dict[str, Any]) -> Any:
    """A checked-out session. Cancelled just as the checkout completes, the session is
    given back before the cancellation goes on: a lost one would hold a worker for good."""
    session = monty.checkout(**options)
    entering = asyncio.ensure_future(session.__aenter__())
    try:
        await entering
    except asyncio.CancelledError:
        if entering.done() and not entering.cancelled() and entering.exception() is None:
            await asyncio.shield(_exit(session))
        raise
    return session


async def _open(monty: Any, options: dict[str, Any]) -> Any:
    """A session ready for a program, spare or not: checked out, the prelude fed and,
    when programs are type-checked, the warm-up. The same feeds either way, so a program
    is the same feed of its session (``<python-input-N>`` in its traceback) whichever
    it gets."""
    session = await _checkout(monty, options)
    try:
        await session.feed_run(_PRELUDE, skip_type_check=True)
        if options["type_check"]:
            await session.feed_run(_WARM_UP)
    except BaseException:
        await _exit(session)
        raise
    return session


async def _exit(session: Any) -> None:
    """Close a discarded spare's session; one that cannot be closed is the pool's to reap."""
    with contextlib.suppress(Exception):
        await session.__aexit__(None, None, None)


def alive(pid: int | None) -> bool:
    """Whether a spare's worker still runs (a killed one the pool has not yet reaped is a
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
