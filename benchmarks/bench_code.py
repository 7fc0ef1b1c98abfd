"""Code mode: a program's fixed cost, a nested call's cost, a fanned-out program's step.

A nested call's cost is the difference between a program making ``NESTED`` sequential
calls and one making none, divided by ``NESTED``; the sandbox round trip is the same
difference for the sandbox alone (``pydantic_monty`` driven as the runtime drives it: a
program run on a thread through the sync API, each call answered with a future and then
its value, no registry), so the two subtract to what toolrail adds per nested call.
Both programs run with ``type_check=False``: a program that calls tools costs the
checker more than ``1 + 1`` does, and that belongs to the fixed cost, not to each call.

Each sample is timed the way an agent meets it: the pools have had the time between
model steps to come to rest (the registry's spare session warm, the sessions of earlier
programs closed: ``SandboxPool``); a checked program's fixed cost is also timed back to
back, just after a program that took the spare.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import toolrail as tr
from toolrail.code import CodeSettings

from ._timing import Figure, ameasure

NESTED = 20
FAN_OUT = 10
IO_SECONDS = 0.005  # stands for 5 ms of I/O
LOOP = f"for i in range({NESTED}):\n    await tools.noop({{}})\n"


async def _noop(arguments: Any, ctx: tr.RunContext) -> str:
    return "done"


async def _wait(arguments: Any, ctx: tr.RunContext) -> str:
    await asyncio.sleep(IO_SECONDS)
    return "done"


def _registry(presentation: str, *, type_check: bool = True) -> tr.ToolRegistry:
    registry = tr.ToolRegistry(presentation=presentation,  # type: ignore[arg-type]
                               code=CodeSettings(type_check=type_check))
    for name, body in (("noop", _noop), ("wait", _wait)):
        registry.register(tr.Tool(name=name, description=name, parameters={"type": "object"},
                                  execute=body, concurrency_safe=True))
    return registry


def _program(code: str) -> tr.ToolCall:
    return tr.ToolCall(call_id="p", name="run_code", arguments={"code": code})


async def _checked(registry: tr.ToolRegistry, call: tr.ToolCall) -> tr.ToolResult:
    result = await registry.execute(call)
    if result.is_error:
        raise RuntimeError(f"the benchmark's program failed: {result.text}")
    return result


class _Sandbox:
    """The sandbox alone, driven as the runtime drives it: the whole program on a
    thread, each call answered with a future, then with its value when awaited."""

    def __init__(self) -> None:
        import pydantic_monty as pm

        self.pm = pm
        self.monty: Any = pm.Monty()
        self.held: Any = None  # checked out ahead (as a warm spare is), or used last

    async def run(self, code: str, io: float = 0.0) -> None:
        """Run ``code`` in a new session, or in the one ``prepare`` checked out (then
        closed by the next ``prepare``); each time the program waits on its calls, they
        take ``io`` seconds (all of them together: they start when the program waits, as
        the runtime's do)."""
        session, self.held = self.held, None
        await asyncio.get_running_loop().run_in_executor(None, self._run, code, io, session)

    async def prepare(self) -> None:
        """Untimed: close the session used last, check one out for the next ``run``
        (as the runtime closes a program's session after its call, and warms a spare)."""
        loop = asyncio.get_running_loop()
        await self.close()
        self.held = await loop.run_in_executor(
            None, lambda: self.monty.checkout(type_check=False).__enter__())

    async def close(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, held.__exit__, None, None, None)

    def _run(self, code: str, io: float, session: Any) -> None:
        if session is None:
            with self.monty.checkout(type_check=False) as session:
                self._drive(session, code, io)
        else:
            self.held = session  # closed untimed by the next ``prepare``
            self._drive(session, code, io)

    def _drive(self, session: Any, code: str, io: float) -> None:
        pm = self.pm
        tools = pm.ClassInstance(_Host(), allowed_methods={"noop", "wait"})
        snapshot = session.feed_start(code, inputs={"tools": tools})
        while not isinstance(snapshot, pm.MontyComplete):
            if isinstance(snapshot, pm.FunctionSnapshot):
                snapshot = snapshot.resume({"future": ...})
            else:
                if io:
                    time.sleep(io)
                snapshot = snapshot.resume(
                    {i: {"return_value": "done"} for i in snapshot.pending_call_ids})


class _AsyncSandbox:
    """The sandbox alone through ``AsyncMonty``, each call answered as ``_Sandbox`` does:
    the round trip the runtime paid before it drove programs from a thread (issue 25
    set its goal against this one)."""

    def __init__(self) -> None:
        import pydantic_monty as pm

        self.pm = pm
        self.monty: Any = pm.AsyncMonty()

    async def run(self, code: str) -> None:
        pm = self.pm
        tools = pm.ClassInstance(_Host(), allowed_methods={"noop"})
        async with self.monty.checkout(type_check=False) as session:
            snapshot = await session.feed_start(code, inputs={"tools": tools})
            while not isinstance(snapshot, pm.MontyComplete):
                if isinstance(snapshot, pm.AsyncFunctionSnapshot):
                    snapshot = await snapshot.resume({"future": ...})
                else:
                    snapshot = await snapshot.resume(
                        {i: {"return_value": "done"} for i in snapshot.pending_call_ids})


class _Host:
    """The host object behind the sandbox-only program's ``tools``."""


async def _rest(*registries: tr.ToolRegistry) -> None:
    """Wait, untimed, until the registries' pools are at rest (the spare sessions warm,
    the sessions of earlier programs closed): the pause between model steps (a model
    takes far longer than the 15-20 ms a spare takes to warm). So no sample pays for
    the background work of one before it."""
    for registry in registries:
        pool = registry._pool
        if pool is not None:
            await pool.ready()


Case = tuple[str, Callable[[], Awaitable[object]], Callable[[], Awaitable[None]]]


async def _rounds(cases: list[Case], repeat: int, *, unit: float = 1e6) -> list[Figure]:
    """One sample of each case per round, the order turning each round so that load
    drift falls on all; each case's untimed ``before`` runs just before its sample."""
    samples: list[list[float]] = [[] for _ in cases]
    for round_ in range(repeat):
        for turn in range(len(cases)):
            which = (turn + round_) % len(cases)
            _, fn, before = cases[which]
            await before()
            start = time.perf_counter()
            await fn()
            samples[which].append((time.perf_counter() - start) * unit)
    return [Figure(label, statistics.median(out), min(out), max(out))
            for (label, _, _), out in zip(cases, samples, strict=True)]


async def nested_figures(repeat: int, target: float) -> list[Figure]:
    native = _registry("native")
    code = _registry("code")
    unchecked = _registry("code", type_check=False)
    sandbox, through_futures = _Sandbox(), _AsyncSandbox()
    sandbox.monty.__enter__()
    await through_futures.monty.__aenter__()
    try:
        empty, looped = _program("1 + 1"), _program(LOOP)
        call = tr.ToolCall(call_id="n", name="noop")
        await _checked(code, looped)  # starts the pools
        await _checked(unchecked, looped)
        async def rest() -> None:
            await _rest(code, unchecked)

        async def used() -> None:  # the program just before took the spare
            await rest()
            await _checked(code, empty)

        figures = await _rounds(
            [("run_code `1 + 1` (checkout + type check + run)", lambda: _checked(code, empty),
              rest),
             ("run_code `1 + 1`, back to back (no spare warm yet)",
              lambda: _checked(code, empty), used),
             ("run_code `1 + 1`, type_check=False", lambda: _checked(unchecked, empty), rest),
             (f"run_code of {NESTED} sequential nested calls, type_check=False",
              lambda: _checked(unchecked, looped), rest),
             ("sandbox alone: `1 + 1`", lambda: sandbox.run("1 + 1"), rest),
             (f"sandbox alone: {NESTED} calls answered at once", lambda: sandbox.run(LOOP),
              rest),
             ("sandbox alone through AsyncMonty: `1 + 1`",
              lambda: through_futures.run("1 + 1"), rest),
             (f"sandbox alone through AsyncMonty: {NESTED} calls",
              lambda: through_futures.run(LOOP), rest)],
            repeat)
        figures.append(await ameasure("execute(): the same tool, native",
                                      lambda: native.execute(call),
                                      number=max(1, int(target * 2e4)), repeat=repeat))
    finally:
        sandbox.monty.__exit__(None, None, None)
        await through_futures.monty.__aexit__(None, None, None)
        await code.aclose()
        await unchecked.aclose()
    _, _, bare, program, alone, alone_loop, futures, futures_loop, _ = figures
    nested = (program.median_us - bare.median_us) / NESTED
    trip = (alone_loop.median_us - alone.median_us) / NESTED
    futures_trip = (futures_loop.median_us - futures.median_us) / NESTED
    return [*figures,
            Figure("one nested call (per call, from the difference)", nested, nested, nested),
            Figure("sandbox round trip (per call, from the difference)", trip, trip, trip),
            Figure("the same through AsyncMonty", futures_trip, futures_trip, futures_trip)]


async def fan_out_figures(repeat: int) -> list[Figure]:
    native = _registry("native")
    code = _registry("code")
    unchecked = _registry("code", type_check=False)
    sandbox = _Sandbox()
    sandbox.monty.__enter__()
    gather = ", ".join(['tools.wait({})'] * FAN_OUT)
    source = f"import asyncio\nawait asyncio.gather({gather})\n"
    program = _program(source)
    calls = [tr.ToolCall(call_id=str(i), name="wait") for i in range(FAN_OUT)]
    await _checked(code, program)  # starts the pools
    await _checked(unchecked, program)
    try:
        async def rest() -> None:
            await _rest(code, unchecked)

        async def ahead() -> None:
            await sandbox.prepare()
            await rest()

        return await _rounds(
            [(f"run(): {FAN_OUT} x 5 ms I/O native calls (ms per step)",
              lambda: native.run(calls, max_parallel=FAN_OUT), rest),
             (f"run_code: asyncio.gather of the same {FAN_OUT} (ms per step)",
              lambda: _checked(code, program), rest),
             ("run_code: the same, type_check=False (ms per step)",
              lambda: _checked(unchecked, program), rest),
             ("sandbox alone: the same program (ms per step)",
              lambda: sandbox.run(source, IO_SECONDS), ahead)],
            repeat, unit=1e3)
    finally:
        await sandbox.close()
        sandbox.monty.__exit__(None, None, None)
        await code.aclose()
        await unchecked.aclose()


async def main(quick: bool) -> list[Figure]:
    figures = await nested_figures(3 if quick else 40, 0.01 if quick else 0.2)
    return figures + await fan_out_figures(4 if quick else 40)


def bars(figures: list[Figure]) -> list[str]:
    fixed, _, _, _, _, _, _, _, execute, nested, trip, futures_trip, step, coded, _, alone = \
        figures
    allowed = 3 * execute.median_us + trip.median_us
    allowed_then = 3 * execute.median_us + futures_trip.median_us
    return [
        f"nested call {nested.median_us:.1f} µs vs 3 x execute() + sandbox round trip "
        f"= {allowed:.1f} µs (bar: at most that)",
        f"nested call {nested.median_us:.1f} µs vs 3 x execute() + AsyncMonty's round trip "
        f"= {allowed_then:.1f} µs (the bar as issue 25 set it)",
        f"fan-out program / native step = {coded.median_us / step.median_us:.2f}x "
        "(bar: at most 1.3x)",
        f"the same program in the sandbox alone / native step = "
        f"{alone.median_us / step.median_us:.2f}x (what of the bar is the sandbox's)",
        f"run_code fixed cost {fixed.median_us / 1e3:.2f} ms (bar: under 10 ms)",
    ]
