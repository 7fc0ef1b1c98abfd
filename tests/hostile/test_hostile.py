"""Hostile inputs through ``execute`` and ``run``: every one ends in a clear result.

Objects whose ``__eq__``, ``__hash__``, ``__str__``, ``__repr__``, ``__iter__``,
``keys()`` or ``items()`` raise — as arguments, return values and exception messages —,
100 000-deep nesting, exponentially shared DAGs, 10 MB strings, non-str keys, NaN and
``BaseException`` subclasses. Each gives the error result pipeline.md names (or
propagates, for the ``BaseException``s it lets through); every call is bounded by
``asyncio.wait_for(..., 5)`` and must leave no task behind, and no coroutine is left
un-awaited (warnings are errors). Hostile and garbage returns from middleware, guards,
approvers and finalize content: test_hostile_middleware.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

import toolrail as tr
from hostile_helpers import (
    INVALID,
    RESULT_NOT_LOSSLESS,
    Hostile,
    HostileList,
    HostileStr,
    Lab,
    T,
    anything,
    assert_error,
    at_stage,
    boom,
    call,
    contained,
)

NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"


UNPRINTABLE = "<unprintable thrown value>"


DEPTH = 100_000


BIG = "x" * 10_000_000


class HostileMap(dict[str, Any]):
    """A dict whose every way of reading raises."""

    __eq__ = __repr__ = __iter__ = __len__ = boom
    __hash__ = boom  # type: ignore[assignment]
    keys = items = values = boom


class Unprintable(Exception):
    __str__ = __repr__ = boom


class NotAStr(Exception):
    def __str__(self) -> Any:
        return 5  # str() of it raises TypeError


class BadCode(tr.ToolError):
    @property
    def code(self) -> str:  # type: ignore[override]
        raise RuntimeError("no code")


class Halt(BaseException):
    """Like KeyboardInterrupt, but does not stop the event loop: the pipeline lets it through."""


def deep_list(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def dag(depth: int) -> Any:
    """2**depth paths through depth + 1 objects."""
    node: Any = []
    for _ in range(depth):
        node = [node, node]
    return node


def noted(log: list[Any], item: Any, answer: T) -> T:
    log.append(item)
    return answer


# ---- hostile arguments ---------------------------------------------------------------

HOSTILE_ARGUMENTS: dict[str, Callable[[], Any]] = {
    "object": Hostile,
    "nested object": lambda: {"k": [1, Hostile()]},
    "mapping": lambda: HostileMap(a=1),
    "nested mapping": lambda: {"k": HostileMap(a=1)},
    "list": lambda: HostileList([1]),
    "non-str key": lambda: {1: "a"},
    "nested non-str key": lambda: {"k": {None: "a"}},
    "nan": lambda: {"x": math.nan},
    "inf in a list": lambda: {"x": [1.0, -math.inf]},
    "set": lambda: {"x": {1, 2}},
    "tuple with a set": lambda: {"x": (1, frozenset({2}))},
    "bytes": lambda: {"x": b"raw"},
    "generator": lambda: {"x": (i for i in range(3))},
}


@pytest.mark.parametrize("make", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
async def test_hostile_arguments_are_an_argument_error_and_nothing_runs(
    make: Callable[[], Any],
) -> None:
    lab = Lab()
    consulted: list[str] = []
    lab.registry.pre_execute(lambda e, n: noted(consulted, "pre", tr.Allow()))
    lab.registry.guard(lambda e: noted(consulted, "guard", None))

    assert_error(await lab.execute(make()), NOT_LOSSLESS)
    for result in (await lab.run(make())).results:
        assert_error(result, NOT_LOSSLESS)
    assert lab.ran == []
    assert consulted == []


@pytest.mark.parametrize("make", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
async def test_a_classifier_is_not_called_for_hostile_arguments(make: Callable[[], Any]) -> None:
    classified: list[object] = []
    lab = Lab(concurrency_safe=lambda arguments: noted(classified, arguments, True))

    for result in (await lab.run(make())).results:
        assert_error(result, NOT_LOSSLESS)
    assert classified == []


async def test_a_hostile_str_subclass_in_the_arguments_reaches_the_body_as_a_plain_str() -> None:
    lab = Lab()

    result = await lab.execute({"k": HostileStr("v")})

    assert result.value == "ok"
    assert lab.ran == [{"k": "v"}]
    assert type(lab.ran[0]["k"]) is str


HOSTILE_RETURNS: dict[str, tuple[Callable[[], Any], str]] = {
    "object": (Hostile, INVALID + "$ is a Hostile"),
    "mapping": (lambda: HostileMap(a=1), INVALID + "$ could not be read: RuntimeError: hostile"),
    "nested mapping": (
        lambda: {"a": [HostileMap(a=1)]},
        INVALID + "$.a[0] could not be read: RuntimeError: hostile",
    ),
    "list": (lambda: HostileList([1]), INVALID + "$ could not be read: RuntimeError: hostile"),
    "non-str key": (lambda: {1: "a"}, INVALID + "$ has a non-str key 1"),
    "hostile key": (lambda: {"a": {(1,): 2}}, INVALID + "$.a has a non-str key (1,)"),
    "nan": (lambda: math.nan, INVALID + "$ is a non-finite float (nan)"),
    "inf in a list": (lambda: [1, math.inf], INVALID + "$[1] is a non-finite float (inf)"),
    "set": (lambda: {"a": {1}}, INVALID + "$.a is a set"),
    "tool output value": (lambda: tr.ToolOutput(value=Hostile()), INVALID + "$ is a Hostile"),
    "an int too long to render": (
        lambda: 10**5000,
        'tool "t" returned invalid output: value cannot be rendered as text: Exceeds the limit '
        "(4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to "
        "increase the limit",
    ),
}


@pytest.mark.parametrize(("make", "message"), HOSTILE_RETURNS.values(), ids=HOSTILE_RETURNS.keys())
async def test_a_hostile_return_value_is_an_invalid_output_result(
    make: Callable[[], Any],
    message: str,
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return make()

    lab = Lab(body)

    for result in (await lab.execute(), *(await lab.run()).results):
        assert result.is_error
        assert result.error is not None
        assert result.error.code == "INVALID_TOOL_OUTPUT"
        assert result.error.type == "ToolOutputError"
        assert result.error.message == message


HOSTILE_OUTPUT_PARTS: dict[str, Callable[[], tr.ToolOutput]] = {
    "meta": lambda: tr.ToolOutput(value="ok", meta={"m": Hostile()}),
    "meta with nan": lambda: tr.ToolOutput(value="ok", meta=[math.nan]),
    "meta with a non-str key": lambda: tr.ToolOutput(value="ok", meta={2: "x"}),
    "content field": lambda: tr.ToolOutput(
        value="ok", content=[tr.TextContent(anything(Hostile()))]
    ),
    "content sequence": lambda: tr.ToolOutput(value="ok", content=HostileList()),
    "content item": lambda: tr.ToolOutput(value="ok", content=anything([Hostile()])),
}


@pytest.mark.parametrize("make", HOSTILE_OUTPUT_PARTS.values(), ids=HOSTILE_OUTPUT_PARTS.keys())
async def test_hostile_meta_or_content_is_a_result_that_is_not_lossless(
    make: Callable[[], tr.ToolOutput],
) -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return make()

    lab = Lab(body)

    for result in (await lab.execute(), *(await lab.run()).results):
        assert_error(result, RESULT_NOT_LOSSLESS)


async def test_a_hostile_str_subclass_returned_is_a_plain_str_value() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return HostileStr("fine")

    result = await Lab(body).execute()

    assert result.value == "fine"
    assert type(result.value) is str
    assert result.content == (tr.TextContent("fine"),)
    assert type(anything(result.content[0]).text) is str


# ---- exceptions whose message cannot be read -----------------------------------------

UNREADABLE_EXCEPTIONS: dict[str, tuple[Callable[[], Exception], str, str | None, str]] = {
    "str raises": (Unprintable, UNPRINTABLE, None, "Unprintable"),
    "str returns a non-str": (NotAStr, UNPRINTABLE, None, "NotAStr"),
    "code raises": (lambda: BadCode("coded"), "coded", None, "BadCode"),
    "huge message": (lambda: RuntimeError(BIG), BIG, None, "RuntimeError"),
}


STAGES = ["body", "pre", "guard", "approver", "around", "post", "finalize"]


def failing_at(stage: str, exc: Callable[[], BaseException]) -> Lab:
    """A lab whose ``stage`` raises ``exc()``."""

    def fail(*args: object) -> Any:
        raise exc()

    async def async_fail(*args: object) -> Any:
        await asyncio.sleep(0)
        raise exc()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        if stage == "body":
            await async_fail()
        return "ok"

    lab = Lab(body, finalize_content=fail if stage == "finalize" else None)
    if stage == "guard":
        lab.registry.guard(fail)
    elif stage not in ("body", "finalize"):
        at_stage(lab.registry, stage, async_fail)
    return lab


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    ("exc", "message", "code", "kind"),
    UNREADABLE_EXCEPTIONS.values(),
    ids=UNREADABLE_EXCEPTIONS.keys(),
)
async def test_an_exception_with_an_unreadable_or_huge_message_is_an_error_result(
    stage: str,
    exc: Callable[[], Exception],
    message: str,
    code: str | None,
    kind: str,
) -> None:
    lab = failing_at(stage, exc)

    assert_error(await lab.execute(), message, code, kind)
    for result in (await lab.run()).results:
        assert_error(result, message, code, kind)


async def test_an_observer_raising_an_unprintable_exception_is_logged_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lab = Lab()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise Unprintable

    lab.registry.on_result(observer, prepend=True)

    with caplog.at_level(logging.WARNING, "toolrail"):
        assert (await lab.execute()).value == "ok"
    assert [r.getMessage() for r in caplog.records] == [
        f'tool "t" (c1): result observer failed: {UNPRINTABLE}'
    ]


# ---- BaseException subclasses --------------------------------------------------------


@pytest.mark.parametrize("stage", [*STAGES, "sync body", "thread body", "observer"])
async def test_a_base_exception_from_any_stage_propagates_and_nothing_is_notified(
    stage: str,
) -> None:
    if stage in ("sync body", "thread body"):

        def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            raise Halt

        lab = Lab(body, inline=stage == "sync body")
    elif stage == "observer":
        lab = Lab()

        def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
            raise Halt

        lab.registry.on_result(observer, prepend=True)
    else:
        lab = failing_at(stage, Halt)

    with pytest.raises(Halt):
        await contained(lab.registry.execute(call()))
    with pytest.raises(Halt):
        await contained(lab.registry.run([call(f"b{i}") for i in range(3)]))
    assert lab.notified == []


async def test_a_base_exception_in_a_batch_stops_it_after_awaiting_the_calls_in_flight() -> None:
    started = asyncio.Event()
    stopped: list[str] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        if ctx.call_id == "b1":
            await asyncio.wait_for(started.wait(), 5)
            raise Halt
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(ctx.call_id)
        return "never"

    lab = Lab(body)

    with pytest.raises(Halt):
        await contained(lab.registry.run([call(f"b{i}") for i in range(3)], max_parallel=3))
    assert sorted(stopped) == ["b0", "b2"]
    assert lab.notified == []


async def test_a_cancelled_error_the_body_raises_itself_is_a_failure_result() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        await asyncio.sleep(0)
        raise asyncio.CancelledError

    lab = Lab(body)

    assert_error(await lab.execute(), "CancelledError", None, "CancelledError")
    for result in (await lab.run()).results:
        assert_error(result, "CancelledError", None, "CancelledError")


@pytest.mark.parametrize("stage", ["pre", "around", "post"])
async def test_a_cancelled_error_a_middleware_raises_itself_propagates(stage: str) -> None:
    lab = failing_at(stage, asyncio.CancelledError)

    with pytest.raises(asyncio.CancelledError):
        await contained(lab.registry.execute(call()))
    with pytest.raises(asyncio.CancelledError):
        await contained(lab.registry.run([call(f"b{i}") for i in range(3)]))
    assert lab.notified == []


# ---- depth, sharing and size ---------------------------------------------------------


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """Move the session's objects out of the collector's way for a 100 000-deep test.

    Such a test allocates hundreds of thousands of containers; every full collection it
    triggers would otherwise walk every object the whole test session holds, which
    multiplies its run time without changing what the library does.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def assert_deep(value: Any, depth: int, container: type, leaf: Any = 0) -> None:
    """``value`` is ``depth`` levels of one-item containers around ``leaf`` (no recursion)."""
    for _ in range(depth):
        assert anything(type(value)) is container
        assert len(value) == 1
        value = value["a"] if isinstance(value, dict) else value[0]
    assert value == leaf


@pytest.mark.usefixtures("frozen_heap")
@pytest.mark.parametrize(
    ("make", "frozen", "thawed"),
    [(deep_list, tuple, list), (deep_dict, tr.FrozenDict, dict)],
    ids=["list", "dict"],
)
async def test_a_hundred_thousand_deep_argument_reaches_the_body_frozen(
    make: Callable[[int], Any], frozen: type, thawed: type
) -> None:
    seen: list[Any] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(arguments)
        return "ok"

    classified: list[Any] = []
    lab = Lab(body, concurrency_safe=lambda arguments: noted(classified, arguments, True))
    deep = make(DEPTH)

    assert (await lab.execute(deep)).value == "ok"
    assert [r.value for r in (await lab.run(deep, n=1)).results] == ["ok"]
    assert len(seen) == 2
    assert classified == seen[1:]  # the classifier saw the snapshot the body got
    for arguments in seen:
        assert_deep(arguments, DEPTH, frozen)
    assert_deep(tr.thaw(seen[0]), DEPTH, thawed)


@pytest.mark.usefixtures("frozen_heap")
async def test_a_hundred_thousand_deep_argument_with_a_set_at_the_bottom_is_an_argument_error() -> (
    None
):
    lab = Lab(concurrency_safe=lambda arguments: True)
    deep = deep_list(DEPTH, {1})

    assert_error(await lab.execute(deep), NOT_LOSSLESS)
    assert_error((await lab.run(deep, n=1)).results[0], NOT_LOSSLESS)
    assert lab.ran == []


@pytest.mark.usefixtures("frozen_heap")
async def test_a_hundred_thousand_deep_value_and_meta_come_back_frozen() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        deep = deep_list(DEPTH)
        return tr.ToolOutput(value=deep, content=[tr.TextContent("deep")], meta=deep)

    lab = Lab(body)
    result = await lab.execute()

    assert result.content == (tr.TextContent("deep"),)
    assert_deep(result.value, DEPTH, tuple)
    assert_deep(result.meta, DEPTH, tuple)
    assert_deep(result.to_dict()["meta"], DEPTH, list)


@pytest.mark.usefixtures("frozen_heap")
async def test_a_hundred_thousand_deep_dict_returned_is_an_invalid_output_result() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return deep_dict(DEPTH)

    lab = Lab(body)

    for result in (await lab.execute(), (await lab.run(n=1)).results[0]):
        assert result.error is not None
        assert result.error.code == "INVALID_TOOL_OUTPUT"
        assert result.error.message.startswith(
            'tool "t" returned invalid output: value cannot be rendered as text: '
        )


async def test_an_exponentially_shared_argument_is_snapshotted_once_and_stays_shared() -> None:
    seen: list[Any] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(arguments)
        return "ok"

    lab = Lab(body, concurrency_safe=lambda arguments: True)
    shared = {"root": dag(200)}

    assert (await lab.execute(shared)).value == "ok"
    assert all(r.value == "ok" for r in (await lab.run(shared)).results)
    for arguments in seen:
        node = anything(arguments)["root"]
        for _ in range(200):
            assert node[0] is node[1]
            node = node[0]


async def test_an_exponentially_shared_value_and_meta_come_back_shared() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> tr.ToolOutput:
        return tr.ToolOutput(value=dag(200), content=[tr.TextContent("dag")], meta=dag(200))

    result = await Lab(body).execute()

    assert isinstance(result.value, tuple)
    assert result.value[0] is result.value[1]
    assert isinstance(result.meta, tuple)
    assert result.meta[0] is result.meta[1]
    thawed = result.to_dict()["value"]
    assert thawed[0] is thawed[1]


async def test_ten_megabyte_strings_pass_through_every_stage() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        assert isinstance(arguments, dict)
        ctx.defer_context(arguments["text"])
        return str(arguments["text"])

    lab = Lab(body)
    lab.registry.post_execute(
        lambda e, r, n: tr.Accept(contexts=[tr.ContextMessage((tr.TextContent(BIG),), "big")])
    )

    result = await lab.execute({"text": BIG})

    assert result.value == BIG
    assert result.content == (tr.TextContent(BIG),)
    assert [c.content for c in result.contexts] == [(tr.TextContent(BIG),)] * 2
    assert all(r.value == BIG for r in (await lab.run({"text": BIG})).results)


async def test_a_ten_megabyte_denial_reason_is_the_error_message() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: tr.Deny(BIG))

    assert_error(await lab.execute(), BIG, "DENIED")


@pytest.mark.parametrize("cancellation", ["interrupt", "cooperative"])
async def test_an_unprintable_exception_after_cancellation_still_gives_one_result(
    cancellation: Literal["interrupt", "cooperative"],
) -> None:
    controller = tr.CancelController()

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        controller.cancel()
        await asyncio.sleep(0)
        raise Unprintable

    lab = Lab(body, cancellation=cancellation)
    result = await contained(
        lab.registry.execute(tr.ToolCall(call_id="c1", name="t", signal=controller.signal))
    )

    assert result.is_error
    assert lab.notified == [("c1", result)]
    assert result.error is not None
    assert result.error.code == ("ABORTED" if cancellation == "interrupt" else None)
