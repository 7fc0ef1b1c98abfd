"""Side by side: the same work through toolrail and through each peer's own execution path.

1. one call of a 3-parameter tool (str, int, int), with an async and with a sync body;
2. one model step: ``STEP_SIZE`` parallel-safe calls, each awaiting 5 ms that stand for I/O;
3. registering typed tools (1 000 in a full run) and listing their schemas;
4. the memory each registered tool keeps (tracemalloc delta / number of tools).

Timings are interleaved round by round, so load on a shared machine weighs on every
framework alike. Floors show the limit: the bare body, and pydantic validation plus the
body. ``benchmarks/peers/`` names the function timed for each peer; a peer that cannot be
imported gets a row saying so.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import math
import statistics
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sized
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict

import toolrail as tr

from ._timing import Figure, ainterleave
from .peers import PEERS, Harness, _work

CALL_ASYNC = "one call, async body (µs per call)"
CALL_SYNC = "one call, sync body run in a worker thread (µs per call)"
STEP = (
    f"one model step: {_work.STEP_SIZE} parallel calls, each awaiting "
    f"{_work.IO_SECONDS * 1e3:.0f} ms of I/O (µs per step)"
)
REGISTER = "register {count} typed tools and list their schemas (ms)"
MEMORY = "memory kept per registered tool (KiB, tracemalloc delta / {count})"

FLOOR = "floor"
TOOLRAIL = "toolrail"

Register = Callable[[list[Callable[..., Any]]], Awaitable[tuple[object, Sized]]]


@dataclass(frozen=True)
class PeerFigure(Figure):
    """A ``Figure`` in one section of the side-by-side table."""

    section: str = ""
    who: str = ""  # FLOOR, TOOLRAIL or a peer's name
    path: str = ""  # the function timed
    unit: str = "µs"
    status: str = ""  # why there is no figure: "not installed", "failed: ..."


@dataclass(frozen=True)
class _Framework:
    name: str
    calls: str
    steps: str
    registers: str
    harness: Callable[[], AbstractAsyncContextManager[Harness]] | None
    register: Register | None
    status: str = ""


@dataclass(frozen=True)
class _Plan:
    repeat: int  # rounds of the interleaved single-call timings
    target: float  # seconds one single-call sample lasts
    steps: int  # rounds of the interleaved step timings, one step per sample
    count: int  # tools registered per round
    rounds: int  # registration rounds


FULL = _Plan(repeat=15, target=0.04, steps=101, count=1000, rounds=3)
QUICK = _Plan(repeat=2, target=0.002, steps=3, count=50, rounds=1)


# ---- toolrail and the floors ----------------------------------------------------------


@asynccontextmanager
async def _toolrail_harness() -> AsyncIterator[Harness]:
    registry = tr.ToolRegistry()
    registry.register(tr.tool(_work.read))
    registry.register(tr.tool(_work.read_sync))
    registry.register(tr.tool(_work.wait, concurrency_safe=True))
    one = tr.ToolCall(call_id="c1", name="read", arguments=_work.ARGS)
    one_sync = tr.ToolCall(call_id="c1", name="read_sync", arguments=_work.ARGS)
    calls = [
        tr.ToolCall(call_id=f"c{i}", name="wait", arguments={"index": i})
        for i in range(_work.STEP_SIZE)
    ]
    yield Harness(
        lambda: registry.execute(one),
        lambda: registry.execute(one_sync),
        lambda: registry.run(calls),
    )


async def _toolrail_register(functions: list[Callable[..., Any]]) -> tuple[object, Sized]:
    registry = tr.ToolRegistry()
    for fn in functions:
        registry.register(tr.tool(fn))
    return registry, registry.schemas()


TOOLRAIL_FRAMEWORK = _Framework(
    TOOLRAIL,
    "registry.execute(ToolCall)",
    "registry.run(calls)",
    "registry.register(tr.tool(fn)) + schemas()",
    _toolrail_harness,
    _toolrail_register,
)


class _ReadArgs(TypedDict):
    path: str
    offset: int
    limit: int


class _WaitArgs(TypedDict):
    index: int


def _floors() -> list[tuple[dict[str, str], Harness]]:
    """The bare bodies, then validation plus the bodies, labelled per section."""
    read_args = TypeAdapter(_ReadArgs).validate_python
    wait_args = TypeAdapter(_WaitArgs).validate_python
    step_args = [{"index": i} for i in range(_work.STEP_SIZE)]
    read, read_sync, wait = _work.read, _work.read_sync, _work.wait

    async def bare_step() -> list[str]:
        return await asyncio.gather(*(wait(**a) for a in step_args))

    async def checked_read() -> str:
        return await read(**read_args(_work.ARGS))

    async def checked_read_sync() -> str:
        return await asyncio.to_thread(read_sync, **read_args(_work.ARGS))

    async def checked_step() -> list[str]:
        return await asyncio.gather(*(wait(**wait_args(a)) for a in step_args))

    gather = f"asyncio.gather of {_work.STEP_SIZE} x"
    return [
        (
            {
                CALL_ASYNC: "`await fn(**args)`",
                CALL_SYNC: "`await asyncio.to_thread(fn, **args)`",
                STEP: f"{gather} `await fn(**args)`",
            },
            Harness(
                lambda: read(**_work.ARGS),
                lambda: asyncio.to_thread(read_sync, **_work.ARGS),
                bare_step,
            ),
        ),
        (
            {
                CALL_ASYNC: "TypeAdapter.validate_python + `await fn(**args)`",
                CALL_SYNC: "validate_python + `await asyncio.to_thread(fn, **args)`",
                STEP: f"{gather} (validate_python + `await fn(**args)`)",
            },
            Harness(checked_read, checked_read_sync, checked_step),
        ),
    ]


# ---- the peers ------------------------------------------------------------------------


def _frameworks() -> list[_Framework]:
    """toolrail, then every peer; one whose module cannot be imported carries a status."""
    frameworks = [TOOLRAIL_FRAMEWORK]
    for peer in PEERS:
        try:
            module = importlib.import_module(f".peers.{peer.module}", __package__)
        except ImportError as exc:
            try:
                installed = importlib.util.find_spec(peer.package) is not None
            except (ImportError, ValueError):
                installed = False
            status = f"failed to import: {exc}" if installed else "not installed"
            frameworks.append(_Framework(peer.name, "", "", "", None, None, status))
            continue
        frameworks.append(
            _Framework(
                peer.name,
                module.CALL,
                module.STEP,
                module.REGISTER,
                module.harness,
                module.register,
            )
        )
    return frameworks


async def _check(harness: Harness) -> None:
    """One call of each kind, so a figure is never the cost of doing the wrong thing."""
    for call in (harness.call_async, harness.call_sync):
        if "/tmp/notes.txt" not in repr(await call()):
            raise RuntimeError("a call did not return the tool's value")
    if repr(await harness.step()).count("done") < _work.STEP_SIZE:
        raise RuntimeError(f"a step did not return {_work.STEP_SIZE} results")


def _missing(section: str, framework: _Framework, status: str) -> PeerFigure:
    nan = math.nan
    return PeerFigure(
        framework.name, nan, nan, nan, section=section, who=framework.name, status=status
    )


# ---- the measurements -----------------------------------------------------------------


async def _timings(frameworks: list[_Framework], plan: _Plan) -> list[PeerFigure]:
    figures: list[PeerFigure] = []
    async with AsyncExitStack() as stack:
        ready: list[tuple[_Framework, Harness]] = []
        broken: dict[str, str] = {}
        for framework in frameworks:
            if framework.harness is None:
                continue
            try:
                harness = await stack.enter_async_context(framework.harness())
                await _check(harness)
            except Exception as exc:
                broken[framework.name] = f"failed: {type(exc).__name__}: {exc}"
            else:
                ready.append((framework, harness))
        floors = _floors()
        # A step lasts over 5 ms: one per sample, many rounds, to outvote scheduling noise.
        sections: list[
            tuple[
                str,
                Callable[[Harness], Callable[[], Awaitable[object]]],
                Callable[[_Framework], str],
                int,
                float,
            ]
        ] = [
            (CALL_ASYNC, lambda h: h.call_async, lambda f: f.calls, plan.repeat, plan.target),
            (CALL_SYNC, lambda h: h.call_sync, lambda f: f.calls, plan.repeat, plan.target),
            (STEP, lambda h: h.step, lambda f: f.steps, plan.steps, 0.001),
        ]
        for section, pick, path, repeat, target in sections:
            cases = [(f"{FLOOR}: {labels[section]}", pick(h)) for labels, h in floors]
            cases += [(f"{f.name}: {path(f)}", pick(h)) for f, h in ready]
            gc.collect()
            timed = await ainterleave(cases, repeat=repeat, target=target)
            figures += [
                PeerFigure(
                    t.label,
                    t.median_us,
                    t.min_us,
                    t.max_us,
                    section=section,
                    who=FLOOR,
                    path=labels[section],
                )
                for t, (labels, _) in zip(timed, floors, strict=False)
            ]
            by_name = dict(zip([f.name for f, _ in ready], timed[len(floors) :], strict=True))
            for framework in frameworks:
                t = by_name.get(framework.name)
                figures.append(
                    _missing(section, framework, framework.status or broken[framework.name])
                    if t is None
                    else PeerFigure(
                        t.label,
                        t.median_us,
                        t.min_us,
                        t.max_us,
                        section=section,
                        who=framework.name,
                        path=path(framework),
                    )
                )
    return figures


async def _registrations(frameworks: list[_Framework], plan: _Plan) -> list[PeerFigure]:
    section = REGISTER.format(count=f"{plan.count:,}".replace(",", " "))
    working = [f for f in frameworks if f.register is not None]
    samples: dict[str, list[float]] = {f.name: [] for f in working}
    failed: dict[str, str] = {}
    for i, framework in enumerate(working):  # warm-up: imports, per-type caches
        try:
            await _registered(framework, _work.typed_functions(10, f"warm_{i}"))
        except Exception as exc:
            failed[framework.name] = f"failed: {type(exc).__name__}: {exc}"
    for round_ in range(plan.rounds):
        for i, framework in enumerate(working):
            if framework.name in failed:
                continue
            functions = _work.typed_functions(plan.count, f"r{round_}_{i}")
            gc.collect()
            start = time.perf_counter()
            kept = await _registered(framework, functions)
            samples[framework.name].append((time.perf_counter() - start) * 1e3)
            del kept
    figures = []
    for framework in frameworks:
        out = samples.get(framework.name)
        if not out:
            figures.append(_missing(section, framework, framework.status or failed[framework.name]))
            continue
        figures.append(
            PeerFigure(
                f"{framework.name}: {framework.registers}",
                statistics.median(out),
                min(out),
                max(out),
                section=section,
                who=framework.name,
                path=framework.registers,
                unit="ms",
            )
        )
    return figures


async def _memories(frameworks: list[_Framework], plan: _Plan) -> list[PeerFigure]:
    section = MEMORY.format(count=f"{plan.count:,}".replace(",", " "))
    figures = []
    for i, framework in enumerate(frameworks):
        if framework.register is None:
            figures.append(_missing(section, framework, framework.status))
            continue
        functions = _work.typed_functions(plan.count, f"m_{i}")
        gc.collect()
        tracemalloc.start()
        try:
            kept = await _registered(framework, functions)
            gc.collect()
            used = tracemalloc.get_traced_memory()[0]
        except Exception as exc:
            figures.append(_missing(section, framework, f"failed: {type(exc).__name__}: {exc}"))
            continue
        finally:
            tracemalloc.stop()
        del kept
        kib = used / plan.count / 1024
        figures.append(
            PeerFigure(
                f"{framework.name}: {framework.registers}",
                kib,
                kib,
                kib,
                section=section,
                who=framework.name,
                path=framework.registers,
                unit="KiB",
            )
        )
    return figures


async def _registered(framework: _Framework, functions: list[Callable[..., Any]]) -> object:
    """Register ``functions`` and list their schemas; returns what keeps the tools alive."""
    assert framework.register is not None
    kept, listed = await framework.register(functions)
    if len(listed) != len(functions):
        raise RuntimeError(f"listed {len(listed)} schemas for {len(functions)} tools")
    return kept


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Move what exists now out of the collector's sight, so ``gc.collect()`` stays cheap.

    Six frameworks make a large heap; a full collection then takes about 0.4 s here.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def main(quick: bool) -> list[Figure]:
    plan = QUICK if quick else FULL
    frameworks = _frameworks()
    figures: list[Figure] = []
    figures += await _timings(frameworks, plan)
    with _frozen_heap():
        figures += await _registrations(frameworks, plan)
        figures += await _memories(frameworks, plan)
    return figures


# ---- the table and the bars -----------------------------------------------------------


def rows(figures: list[Figure]) -> list[str]:
    """The side-by-side table: per section the floors, toolrail, then each peer."""
    lines = [f"versions: {', '.join(_versions())}"]
    peer_figures = [f for f in figures if isinstance(f, PeerFigure)]
    for section in dict.fromkeys(f.section for f in peer_figures):
        these = [f for f in peer_figures if f.section == section]
        ours = next((f for f in these if f.who == TOOLRAIL and not f.status), None)
        floor = next((f for f in these if f.who == FLOOR), None)
        lines.append(section)
        for figure in these:
            lines.append("  " + _row(figure, ours, floor if section == STEP else None))
    return lines


def _versions() -> list[str]:
    found = []
    for name, distribution in (
        ("toolrail", "toolrail"),
        *((p.name, p.distribution) for p in PEERS),
    ):
        try:
            found.append(f"{name} {metadata.version(distribution)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return found


def _row(figure: PeerFigure, ours: PeerFigure | None, floor: PeerFigure | None) -> str:
    head = f"{figure.who:<18} {figure.path:<62}"
    if figure.status:
        return f"{head} {figure.status}"
    spread = (
        f"(min {_num(figure.min_us)}, max {_num(figure.max_us)})"
        if figure.min_us != figure.max_us
        else ""
    )
    line = f"{head} {_num(figure.median_us):>9} {figure.unit:<3} {spread:<26}"
    if figure.who == FLOOR or ours is None:
        return line.rstrip()
    if floor is not None:
        overhead = figure.median_us - floor.median_us
        line += f" overhead {overhead:.0f} µs"
        if figure is not ours:
            line += f", toolrail's is {_ratio(overhead, ours.median_us - floor.median_us)}"
        return line
    if figure is ours:
        return line.rstrip()
    ratio = figure.median_us / ours.median_us
    if figure.unit == "KiB":
        return line + (
            f" toolrail keeps {ratio:.1f}x less"
            if ratio >= 1
            else f" toolrail keeps {1 / ratio:.1f}x more"
        )
    return line + (
        f" toolrail is {ratio:.1f}x faster"
        if ratio >= 1
        else f" toolrail is {1 / ratio:.1f}x slower"
    )


def _ratio(theirs: float, ours: float) -> str:
    if ours <= 0 or theirs <= 0:
        return "n/a (at the floor)"
    return f"{theirs / ours:.1f}x smaller" if theirs >= ours else f"{ours / theirs:.1f}x larger"


def _num(value: float) -> str:
    if value < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def bars(figures: list[Figure]) -> list[str]:
    """The issue's bars, as ratios measured in this run."""
    by: dict[tuple[str, str], PeerFigure] = {}
    for f in figures:  # the first of each, so the bare floor stands for the floors
        if isinstance(f, PeerFigure) and not f.status:
            by.setdefault((f.section, f.who), f)
    ours = by.get((CALL_ASYNC, TOOLRAIL))
    peers = [
        f
        for (section, who), f in by.items()
        if section == CALL_ASYNC and who not in (FLOOR, TOOLRAIL)
    ]
    if ours is None or not peers:
        fastest = "n/a (no peer measured)"
    else:
        best = min(peers, key=lambda f: f.median_us)
        fastest = f"{best.median_us / ours.median_us:.1f}x ({best.who}, async body)"
    langchain = by.get((CALL_ASYNC, "LangChain"))
    versus = (
        "n/a (LangChain not measured)"
        if ours is None or langchain is None
        else f"{langchain.median_us / ours.median_us:.1f}x (async body)"
    )
    floor = by.get((STEP, FLOOR))
    mine = by.get((STEP, TOOLRAIL))
    steps = []
    for name in ("OpenAI Agents SDK", "pydantic-ai"):
        theirs = by.get((STEP, name))
        if floor is None or mine is None or theirs is None:
            steps.append("n/a")
            continue
        ours_over = mine.median_us - floor.median_us
        theirs_over = theirs.median_us - floor.median_us
        steps.append(f"{theirs_over / ours_over:.1f}x" if ours_over > 0 else "n/a")
    return [
        f"toolrail single call vs fastest peer: {fastest} (bar: at least 2x)",
        f"toolrail single call vs LangChain: {versus} (bar: at least 20x)",
        f"10-call step vs OpenAI Agents SDK / pydantic-ai: {' / '.join(steps)} "
        "less overhead above the floor (bar: at least 5x)",
    ]


if __name__ == "__main__":
    for line in rows(asyncio.run(main(quick=False))):
        print(line)
