"""Hostile inputs through ``execute`` and ``run``: every one ends in a clear result.

Objects whose ``__eq__``, ``__hash__``, ``__str__``, ``__repr__``, ``__iter__``,
``keys()`` or ``items()`` raise — as arguments, return values, middleware returns and
exception messages —, 100 000-deep nesting, exponentially shared DAGs, 10 MB strings,
non-str keys, NaN, ``BaseException`` subclasses, and garbage from middleware. Each
gives the error result pipeline.md names (or propagates, for the ``BaseException``s it
lets through); every call is bounded by ``asyncio.wait_for(..., 5)`` and must leave no
task behind, and no coroutine is left un-awaited (warnings are errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal, TypeVar

import pytest

import toolrail as tr

T = TypeVar("T")

Body = Callable[[tr.JsonValue, tr.RunContext], Any]
CallNext = Callable[[], Awaitable[Any]]

NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"
RESULT_NOT_LOSSLESS = "tool result must be losslessly JSON-serializable"
UNPRINTABLE = "<unprintable thrown value>"
DEPTH = 100_000
BIG = "x" * 10_000_000


# ---- hostile objects ------------------------------------------------------------------


def boom(*args: object) -> Any:
    raise RuntimeError("hostile")


class Hostile:
    """Every protocol raises."""

    __eq__ = __hash__ = __str__ = __repr__ = __iter__ = __len__ = __bool__ = boom
    keys = items = values = boom


class HostileMap(dict[str, Any]):
    """A dict whose every way of reading raises."""

    __eq__ = __repr__ = __iter__ = __len__ = boom
    __hash__ = boom  # type: ignore[assignment]
    keys = items = values = boom


class HostileList(list[Any]):
    """A list whose every way of reading raises."""

    __eq__ = __repr__ = __iter__ = __len__ = __bool__ = boom
    __hash__ = boom  # type: ignore[assignment]


class HostileStr(str):
    """A str whose protocols raise; its value is still a plain string underneath."""

    __eq__ = __hash__ = __str__ = __repr__ = boom


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


class HostileResult(tr.ToolResult):
    """A ToolResult whose every attribute read raises."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


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


def unwrap(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = value[0]
    return value


# ---- helpers -------------------------------------------------------------------------


async def contained(awaitable: Awaitable[T]) -> T:
    """Await with a bound, then check that nothing it started is still running."""
    before = asyncio.all_tasks()
    try:
        return await asyncio.wait_for(awaitable, 5)
    finally:
        assert asyncio.all_tasks() - before == set()


def anything(value: object) -> Any:
    """Hand a deliberately ill-typed value to an API (the point of these tests)."""
    return value


def noted(log: list[Any], item: Any, answer: T) -> T:
    log.append(item)
    return answer


def make_tool(execute: Body, **options: Any) -> tr.Tool:
    options.setdefault("concurrency_safe", True)
    return tr.Tool(
        name="t", description="d", parameters={"type": "object"}, execute=execute, **options
    )


def call(call_id: str = "c1", arguments: Any = None) -> tr.ToolCall:
    return tr.ToolCall(call_id=call_id, name="t", arguments={} if arguments is None else arguments)


def assert_error(
    result: tr.ToolResult, message: str, code: str | None = None, kind: str | None = None
) -> None:
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(message, code, kind)
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None


class Lab:
    """A registry with one tool, recording body runs and observer notifications."""

    def __init__(self, body: Body | None = None, **options: Any) -> None:
        self.ran: list[Any] = []
        self.notified: list[tuple[str, tr.ToolResult]] = []
        self.registry = tr.ToolRegistry()

        async def default(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            self.ran.append(arguments)
            return "ok"

        self.registry.register(make_tool(default if body is None else body, **options))
        self.registry.on_result(lambda e, r: self.notified.append((e.call_id, r)))

    async def execute(self, arguments: Any = None) -> tr.ToolResult:
        result = await contained(self.registry.execute(call(arguments=arguments)))
        assert self.notified == [("c1", result)]
        assert self.notified[0][1] is result
        return result

    async def run(self, arguments: Any = None, n: int = 3) -> tr.Batch:
        calls = [call(f"b{i}", arguments) for i in range(n)]
        batch = await contained(self.registry.run(calls, max_parallel=2))
        assert len(batch.results) == n
        assert self.notified[-n:] == [(f"b{i}", r) for i, r in enumerate(batch.results)]
        return batch


@contextlib.contextmanager
def no_coroutine_left_unawaited() -> Iterator[None]:
    """Fail if a coroutine is dropped without being awaited or closed (warnings are errors)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    never = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert never == []


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


# ---- hostile return values -----------------------------------------------------------

INVALID = 'tool "t" returned invalid output: value is not lossless JSON: '

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


# ---- hostile middleware, guard, approver and finalize returns ------------------------


async def test_pre_execute_returning_a_hostile_object_is_a_final_error() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: Hostile())

    assert_error(
        await lab.execute(),
        "pre-execute middleware returned <Hostile object>, not Allow, Deny or Ask",
    )
    assert lab.ran == []


async def test_a_deny_with_a_hostile_reason_is_a_final_error() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: tr.Deny(Hostile()))  # type: ignore[arg-type]

    assert_error(
        await lab.execute(), "pre-execute middleware returned <Deny object>, not Allow, Deny or Ask"
    )


async def test_deny_and_ask_reasons_that_are_hostile_str_subclasses_read_as_plain_str() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: tr.Deny(HostileStr("no")))
    scoped = lab.registry.scope("s")
    scoped.pre_execute(lambda e, n: tr.Ask(HostileStr("why")), prepend=True)

    assert_error(await lab.execute(), "no", "DENIED")
    asked = await contained(scoped.execute(call("c2")))
    assert_error(asked, "why", "DENIED")
    assert type(asked.error.message) is str  # type: ignore[union-attr]


@pytest.mark.parametrize("defers", [False, True])
async def test_around_execute_returning_a_hostile_tool_result_is_an_error_result(
    defers: bool,
) -> None:
    """A ToolResult (subclass) whose fields cannot be read: materializing it fails."""

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        if defers:
            ctx.defer_context("note")
        return "ok"

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        await call_next()
        return HostileResult(content=())

    lab = Lab(body)
    lab.registry.around_execute(around)

    assert_error(await lab.execute(), RESULT_NOT_LOSSLESS)
    for result in (await lab.run()).results:
        assert_error(result, RESULT_NOT_LOSSLESS)


HOSTILE_RESULT_FIELDS: dict[str, Callable[[], tr.ToolResult]] = {
    "content text": lambda: tr.ToolResult((tr.TextContent(anything(Hostile())),)),
    "content sequence": lambda: tr.ToolResult(anything(HostileList())),
    "value": lambda: tr.ToolResult((tr.TextContent("x"),), value=anything(Hostile())),
    "meta": lambda: tr.ToolResult((tr.TextContent("x"),), meta=anything({"k": math.nan})),
    "contexts": lambda: tr.ToolResult((tr.TextContent("x"),), contexts=anything((Hostile(),))),
    "is_error": lambda: tr.ToolResult((tr.TextContent("x"),), is_error=anything(Hostile())),
}


@pytest.mark.parametrize("make", HOSTILE_RESULT_FIELDS.values(), ids=HOSTILE_RESULT_FIELDS.keys())
async def test_around_execute_returning_a_result_with_a_hostile_field_is_an_error_result(
    make: Callable[[], tr.ToolResult],
) -> None:
    lab = Lab()
    lab.registry.around_execute(lambda e, n: make())

    assert_error(await lab.execute(), RESULT_NOT_LOSSLESS)
    for result in (await lab.run()).results:
        assert_error(result, RESULT_NOT_LOSSLESS)


async def test_a_failure_whose_error_info_is_hostile_gets_one_made_from_its_text() -> None:
    lab = Lab()
    lab.registry.around_execute(
        lambda e, n: tr.ToolResult(
            (tr.TextContent("went wrong"),), True, error=tr.ErrorInfo(anything(Hostile()))
        )
    )

    result = await lab.execute()

    assert result.is_error
    assert result.error == tr.ErrorInfo("went wrong")
    assert result.content == (tr.TextContent("went wrong"),)


async def test_around_execute_returning_a_hostile_object_is_a_final_error() -> None:
    lab = Lab()
    lab.registry.around_execute(lambda e, n: Hostile())

    assert_error(
        await lab.execute(), "around-execute middleware returned <Hostile object>, not a ToolResult"
    )
    assert lab.ran == []


POST_RETURNS: dict[str, tuple[Callable[[], Any], str, str | None, str | None]] = {
    "object": (
        Hostile,
        "post-execute middleware returned <Hostile object>, not Accept or Block",
        None,
        None,
    ),
    "block feedback": (
        lambda: tr.Block(anything(Hostile())),
        "post-execute middleware returned <Block object>, not Accept or Block",
        None,
        None,
    ),
    "accept content": (
        lambda: tr.Accept(content=HostileList([tr.TextContent("x")])),
        "post-execute middleware returned <Accept object>, not Accept or Block",
        None,
        None,
    ),
    "accept value": (
        lambda: tr.Accept(value=Hostile()),
        INVALID + "$ is a Hostile",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    ),
    "accept value nan": (
        lambda: tr.Accept(value={"r": math.nan}),
        INVALID + "$.r is a non-finite float (nan)",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    ),
    "accept value with a non-str key": (
        lambda: tr.Accept(value={3: "x"}),
        INVALID + "$ has a non-str key 3",
        "INVALID_TOOL_OUTPUT",
        "ToolOutputError",
    ),
    "context meta": (
        lambda: tr.Accept(
            contexts=[tr.ContextMessage((tr.TextContent("c"),), "s", anything(Hostile()))]
        ),
        RESULT_NOT_LOSSLESS,
        None,
        None,
    ),
}


@pytest.mark.parametrize(
    ("make", "message", "code", "kind"), POST_RETURNS.values(), ids=POST_RETURNS.keys()
)
async def test_post_execute_returning_hostile_decisions_is_an_error_result(
    make: Callable[[], Any],
    message: str,
    code: str | None,
    kind: str | None,
) -> None:
    lab = Lab()
    lab.registry.post_execute(lambda e, r, n: make())

    assert_error(await lab.execute(), message, code, kind)
    for result in (await lab.run()).results:
        assert_error(result, message, code, kind)


class NamedGuard:
    def __init__(self, verdict: Callable[[], Any]) -> None:
        self.verdict = verdict

    def __call__(self, execution: tr.Execution) -> Any:
        return self.verdict()

    def __repr__(self) -> str:
        return "<named guard>"


async def test_a_guard_returning_a_hostile_object_is_a_final_error() -> None:
    lab = Lab()
    lab.registry.guard(NamedGuard(Hostile))

    assert_error(
        await lab.execute(),
        "guard <named guard> returned <Hostile object>; a guard "
        "returns a reason string to deny or None to abstain",
    )
    assert lab.ran == []


async def test_a_guard_returning_a_hostile_str_subclass_denies_with_the_plain_str() -> None:
    lab = Lab()
    lab.registry.guard(NamedGuard(lambda: HostileStr("not here")))

    result = await lab.execute()

    assert_error(result, "not here", "DENIED")
    assert type(result.error.message) is str  # type: ignore[union-attr]
    assert lab.ran == []


async def test_an_approver_returning_a_hostile_object_is_an_invalid_outcome() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: tr.Ask())
    lab.registry.approver = lambda request: Hostile()  # type: ignore[assignment,return-value]

    assert_error(await lab.execute(), "approver returned an invalid outcome: <Hostile object>")
    assert lab.ran == []


async def test_an_approver_answering_with_a_hostile_str_subclass_is_read_by_its_value() -> None:
    """A str subclass is its plain string everywhere else (reasons, guards, snapshots)."""
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: tr.Ask())
    lab.registry.approver = lambda request: HostileStr("allowed-once")

    assert (await lab.execute()).value == "ok"
    assert lab.ran == [{}]

    lab.registry.approver = lambda request: HostileStr("maybe")
    lab.notified.clear()
    assert_error(await lab.execute(), "approver returned an invalid outcome: <HostileStr object>")


async def test_finalize_content_returning_hostile_values_is_an_error_result() -> None:
    for returned, name in ((Hostile(), "Hostile"), (HostileList(), "HostileList")):
        lab = Lab(finalize_content=lambda e, r, returned=returned: returned)
        assert_error(
            await lab.execute(),
            f"finalize_content returned <{name} object>, not None or a sequence of Content",
        )


async def test_an_observer_returning_a_hostile_object_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lab = Lab()
    lab.registry.on_result(anything(lambda e, r: Hostile()))

    with caplog.at_level(logging.DEBUG, "toolrail"):
        assert (await lab.execute()).value == "ok"
    assert caplog.records == []


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
    registry = lab.registry
    if stage == "pre":
        registry.pre_execute(async_fail)
    elif stage == "guard":
        registry.guard(fail)
    elif stage == "approver":
        registry.pre_execute(lambda e, n: tr.Ask())
        registry.approver = async_fail
    elif stage == "around":
        registry.around_execute(async_fail)
    elif stage == "post":
        registry.post_execute(async_fail)
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


# ---- garbage from middleware: None, ints, coroutines nobody awaits -------------------


async def allow_later() -> tr.Allow:
    return tr.Allow()


GARBAGE_STAGES = ["pre", "around", "post", "approver"]
MESSAGES = {
    "pre": "pre-execute middleware returned {}, not Allow, Deny or Ask",
    "around": "around-execute middleware returned {}, not a ToolResult",
    "post": "post-execute middleware returned {}, not Accept or Block",
    "approver": "approver returned an invalid outcome: {}",
}


def returning(stage: str, garbage: Callable[[], Any], *, awaited: bool) -> Lab:
    """A lab whose ``stage`` returns ``garbage()`` (from a coroutine when ``awaited``)."""

    def plain(*args: object) -> Any:
        return garbage()

    async def wrapped(*args: object) -> Any:
        return garbage()

    fn = wrapped if awaited else plain
    lab = Lab()
    registry = lab.registry
    if stage == "pre":
        registry.pre_execute(fn)
    elif stage == "around":
        registry.around_execute(fn)
    elif stage == "post":
        registry.post_execute(fn)
    else:
        registry.pre_execute(lambda e, n: tr.Ask())
        registry.approver = fn
    return lab


@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("garbage", "shown"), [(lambda: None, "None"), (lambda: 7, "7")], ids=["None", "int"]
)
@pytest.mark.parametrize("stage", GARBAGE_STAGES)
async def test_middleware_returning_none_or_an_int_is_a_final_error(
    stage: str,
    garbage: Callable[[], Any],
    shown: str,
    awaited: bool,
) -> None:
    lab = returning(stage, garbage, awaited=awaited)

    assert_error(await lab.execute(), MESSAGES[stage].format(shown))


@pytest.mark.parametrize("stage", GARBAGE_STAGES)
async def test_a_coroutine_returned_from_an_async_middleware_is_a_final_error_and_closed(
    stage: str,
) -> None:
    """An async middleware returning a coroutine: what it awaits to is garbage to close."""
    lab = returning(stage, allow_later, awaited=True)

    with no_coroutine_left_unawaited():
        result = await lab.execute()

    assert result.error is not None
    before, after = MESSAGES[stage].split("{}")
    assert result.error.message.startswith(before + "<coroutine object ")
    assert result.error.message.endswith(after)


async def test_a_body_returning_a_coroutine_is_invalid_output_and_the_coroutine_is_closed() -> None:
    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return allow_later()

    with no_coroutine_left_unawaited():
        result = await Lab(body).execute()

    assert_error(result, INVALID + "$ is a coroutine", "INVALID_TOOL_OUTPUT", "ToolOutputError")


async def test_a_sync_middleware_may_return_a_coroutine_which_is_awaited() -> None:
    lab = Lab()
    lab.registry.pre_execute(lambda e, n: allow_later())

    with no_coroutine_left_unawaited():
        assert (await lab.execute()).value == "ok"


async def test_guards_observers_and_finalize_returning_coroutines_have_them_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with no_coroutine_left_unawaited():
        lab = Lab()
        lab.registry.guard(NamedGuard(allow_later))
        result = await lab.execute()
        assert result.error is not None
        assert result.error.message.startswith("guard <named guard> returned <coroutine object")

        lab = Lab(finalize_content=lambda e, r: allow_later())
        result = await lab.execute()
        assert result.error is not None
        assert result.error.message.startswith("finalize_content returned <coroutine object")

        lab = Lab()
        lab.registry.on_result(anything(lambda e, r: allow_later()))
        with caplog.at_level(logging.WARNING, "toolrail"):
            assert (await lab.execute()).value == "ok"
    assert [r.getMessage() for r in caplog.records] == [
        'tool "t" (c1): result observer failed: observers must be synchronous'
    ]


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
