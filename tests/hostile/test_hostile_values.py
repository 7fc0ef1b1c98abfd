"""Foreign values the registry inspects: judged by their type, never by their own code.

An object whose ``__getattribute__`` raises for every name (``__class__`` included)
defeats ``isinstance`` and ``inspect.isawaitable``, which read ``x.__class__``. Such an
object — returned by a body, a middleware, a guard, an approver, ``finalize_content``
or an observer, or raised — must still end in the result pipeline.md names, through
``execute`` and through ``run``. So must fields whose ``__eq__`` raises, a metaclass
whose ``__name__`` or ``__hash__`` raises, a 1 500-deep context meta, strict typed
arguments past ``json.dumps``'s limits, and ``str`` subclasses that would leave a
frozen result mutable.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator

import toolrail as tr
from hostile_helpers import NamedGuard, at_stage

CallNext = Callable[[], Awaitable[tr.ToolResult]]
Body = Callable[[tr.JsonValue, tr.RunContext], Any]

INVALID = 'tool "t" returned invalid output: value is not lossless JSON: '
RESULT_NOT_LOSSLESS = "tool result must be losslessly JSON-serializable"


# ---- hostile objects ------------------------------------------------------------------


class Opaque:
    """Every attribute read raises, ``__class__`` included; only its type can be asked."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")

    def __repr__(self) -> str:  # reached through the type's slot, not an attribute read
        return "<opaque>"


class OpaqueError(Exception):
    """An exception whose attributes cannot be read (its message still can, by slot)."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


class OpaqueToolError(tr.ToolError):
    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


class RaisingName(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class LyingName(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        return "Fake"


class Nameless(Exception, metaclass=RaisingName):
    """Its class's ``__name__`` raises; its message is empty, so the name is needed."""

    def __str__(self) -> str:
        return ""


class Liar(Exception, metaclass=LyingName):
    def __str__(self) -> str:
        return ""


class Unhashable(type):
    def __hash__(cls) -> int:
        raise RuntimeError("no hash")

    def __eq__(cls, other: object) -> bool:
        raise RuntimeError("no eq")


class UnhashableKind(metaclass=Unhashable):
    def __repr__(self) -> str:
        return "<unhashable kind>"


class EqRaises(str):
    """A str whose comparison raises; its value is a plain string underneath."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = str.__hash__


class ListEqRaises(list[Any]):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = None


class Code(enum.StrEnum):
    LIMIT = "RATE_LIMITED"


class Text(enum.StrEnum):
    SLOW = "slow down"


class SubStr(str):
    """A plain str subclass: its instances have a __dict__, so they can be changed."""


class StrSubclassMessage(Exception):
    def __str__(self) -> str:
        return SubStr("sub message")


class CancelRaises(asyncio.Future[Any]):
    def cancel(self, msg: Any = None) -> bool:
        raise RuntimeError("no cancel")


def deep_dict(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_list(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def noted(log: list[Any], item: Any, answer: Any) -> Any:
    log.append(item)
    return answer


def anything(value: object) -> Any:
    """Hand a deliberately ill-typed value to an API (the point of these tests)."""
    return value


# ---- harness -------------------------------------------------------------------------


async def contained(awaitable: Awaitable[Any]) -> Any:
    """Await with a bound, then check that nothing it started is still running."""
    before = asyncio.all_tasks()
    try:
        return await asyncio.wait_for(awaitable, 5)
    finally:
        assert asyncio.all_tasks() - before == set()


class Lab:
    """A registry with one tool "t"; ``results`` runs it through ``execute`` and ``run``."""

    def __init__(self, body: Body | tr.Tool | None = None, **options: Any) -> None:
        self.notified: list[tuple[str, tr.ToolResult]] = []
        self.registry = tr.ToolRegistry()

        async def default(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            return "ok"

        if isinstance(body, tr.Tool):
            self.registry.register(body)
            self.name = body.name
        else:
            options.setdefault("concurrency_safe", True)
            self.registry.register(tr.Tool(
                name="t", description="d", parameters={"type": "object"},
                execute=default if body is None else body, **options))
            self.name = "t"
        self.registry.on_result(lambda e, r: self.notified.append((e.call_id, r)))

    def call(self, call_id: str, arguments: Any) -> tr.ToolCall:
        return tr.ToolCall(call_id=call_id, name=self.name,
                           arguments={} if arguments is None else arguments)

    async def results(self, arguments: Any = None, n: int = 3) -> list[tr.ToolResult]:
        """One result from ``execute``, then ``n`` from one ``run`` batch, each notified."""
        single = await contained(self.registry.execute(self.call("c0", arguments)))
        assert self.notified == [("c0", single)]
        assert self.notified[0][1] is single
        calls = [self.call(f"b{i}", arguments) for i in range(n)]
        batch = await contained(self.registry.run(calls, max_parallel=2))
        assert [(i, r) for i, r in self.notified[1:]] == [
            (f"b{i}", r) for i, r in enumerate(batch.results)]
        return [single, *batch.results]


def assert_error(result: tr.ToolResult, message: str, code: str | None = None,
                 kind: str | None = None) -> None:
    assert result.is_error is True
    assert result.error == tr.ErrorInfo(message, code, kind)
    assert result.content == (tr.TextContent("Error: " + message),)
    assert result.value is None


def assert_plain(result: tr.ToolResult) -> None:
    """Every str the result holds is a plain ``str`` (nothing in it can be changed)."""
    if result.error is not None:
        for value in (result.error.message, result.error.code, result.error.type):
            assert value is None or type(value) is str
    for block in result.content:
        assert type(block) in (tr.TextContent, tr.ImageContent)
        assert all(type(v) is str for v in (getattr(block, "text", ""),
                                            getattr(block, "data", ""),
                                            getattr(block, "mime_type", "")))
    for context in result.contexts:
        assert type(context) is tr.ContextMessage
        assert type(context.source) is str


# ---- issue 12.1 / 18.7: a body returning an unreadable object ------------------------


def returns(out: Callable[[], Any], how: str) -> Lab:
    """A lab whose body returns ``out()``, run the way ``how`` says."""
    async def async_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        await asyncio.sleep(0)
        return out()

    async def quick_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return out()

    if how == "async":
        return Lab(async_body)
    if how == "async, no wait":
        return Lab(quick_body)
    if how == "async, timeout":
        return Lab(quick_body, timeout=5)
    if how == "cooperative":
        return Lab(quick_body, cancellation="cooperative")

    def sync_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> Any:
        return out()

    if how == "inline returning a coroutine":
        async def later() -> Any:
            return out()
        return Lab(lambda arguments, ctx: later(), inline=True)
    return Lab(sync_body, inline=how == "inline")


HOWS = ["async", "async, no wait", "async, timeout", "cooperative", "thread", "inline",
        "inline returning a coroutine"]

UNREADABLE_VALUES: dict[str, tuple[Callable[[], Any], str]] = {
    "object": (Opaque, INVALID + "$ is an Opaque"),
    "in a list": (lambda: [1, Opaque()], INVALID + "$[1] is an Opaque"),
    "in a dict": (lambda: {"k": Opaque()}, INVALID + "$.k is an Opaque"),
    "tool output value": (lambda: tr.ToolOutput(value=Opaque()), INVALID + "$ is an Opaque"),
    "unhashable kind": (UnhashableKind, INVALID + "$ is an UnhashableKind"),
}


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize(("make", "message"), UNREADABLE_VALUES.values(),
                         ids=UNREADABLE_VALUES.keys())
async def test_a_body_returning_an_unreadable_object_is_invalid_output_with_the_snapshot_reason(
    how: str, make: Callable[[], Any], message: str
) -> None:
    for result in await returns(make, how).results():
        assert_error(result, message, "INVALID_TOOL_OUTPUT", "ToolOutputError")


@pytest.mark.parametrize("how", ["async", "thread", "inline"])
@pytest.mark.parametrize("part", ["meta", "content", "content item"])
async def test_an_unreadable_tool_output_meta_or_content_is_a_result_that_is_not_lossless(
    how: str, part: str
) -> None:
    def make() -> tr.ToolOutput:
        if part == "meta":
            return tr.ToolOutput(value="ok", meta=Opaque())
        if part == "content":
            return tr.ToolOutput(value="ok", content=anything(Opaque()))
        return tr.ToolOutput(value="ok", content=anything([Opaque()]))

    for result in await returns(make, how).results():
        assert_error(result, RESULT_NOT_LOSSLESS)


async def test_a_content_subclass_whose_attributes_cannot_be_read_is_not_lossless() -> None:
    class OpaqueText(tr.TextContent):
        __slots__ = ()

        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError(f"cannot read {name}")

    for result in await returns(lambda: [OpaqueText("x")], "async").results():
        assert_error(result, RESULT_NOT_LOSSLESS)


# ---- typed tools returning an unreadable object --------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync", "inline"])
async def test_a_typed_tool_returning_an_unreadable_object_is_invalid_output(kind: str) -> None:
    if kind == "async":
        @tr.tool(name="t", concurrency_safe=True)
        async def typed(x: int = 0) -> Any:
            return Opaque()
    else:
        @tr.tool(name="t", concurrency_safe=True, inline=kind == "inline")
        def typed(x: int = 0) -> Any:
            return Opaque()

    for result in await Lab(typed).results():
        assert result.error is not None
        assert result.error.code == "INVALID_TOOL_OUTPUT"
        assert result.error.type == "ToolOutputError"
        assert result.error.message.startswith('tool "t" returned invalid output: ')


def refuse(value: int) -> int:
    raise RuntimeError("refused")


def refuse_coded(value: int) -> int:
    raise tr.ToolError("refused", code="REFUSED")


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_return_validator_that_raises_is_invalid_output_with_its_message(
    kind: str,
) -> None:
    """Like a serializer that raises (typed-tools.md); a ToolError keeps its code."""
    if kind == "async":
        @tr.tool(name="t", concurrency_safe=True)
        async def typed(coded: bool = False) -> Annotated[int, AfterValidator(refuse)]:
            return 1

        @tr.tool(name="t", concurrency_safe=True)
        async def coded() -> Annotated[int, AfterValidator(refuse_coded)]:
            return 1
    else:
        @tr.tool(name="t", concurrency_safe=True)
        def typed(coded: bool = False) -> Annotated[int, AfterValidator(refuse)]:
            return 1

        @tr.tool(name="t", concurrency_safe=True)
        def coded() -> Annotated[int, AfterValidator(refuse_coded)]:
            return 1

    for result in await Lab(typed).results():
        assert_error(result, 'tool "t" returned invalid output: refused', "INVALID_TOOL_OUTPUT",
                     "ToolOutputError")
    for result in await Lab(coded).results():
        assert_error(result, "refused", "REFUSED", "ToolError")


# ---- middleware, guard, approver and finalize returning unreadable objects -----------

PRE = "pre-execute middleware returned {}, not Allow, Deny or Ask"
AROUND = "around-execute middleware returned {}, not a ToolResult"
POST = "post-execute middleware returned {}, not Accept or Block"
APPROVER = "approver returned an invalid outcome: {}"
FINALIZE = "finalize_content returned {}, not None or a sequence of Content"


def returning(stage: str, out: Callable[[], Any], awaited: bool = False) -> Lab:
    """A lab whose ``stage`` returns ``out()`` (from a coroutine when ``awaited``)."""

    def plain(*args: object) -> Any:
        return out()

    async def later(*args: object) -> Any:
        return out()

    fn = later if awaited else plain
    if stage == "finalize":
        return Lab(finalize_content=fn)
    lab = Lab()
    if stage == "guard":
        lab.registry.guard(NamedGuard(out))
    else:
        at_stage(lab.registry, stage, fn)
    return lab


RETURNS: dict[str, tuple[str, Callable[[], Any], str]] = {
    "pre object": ("pre", Opaque, PRE.format("<opaque>")),
    "pre deny reason": ("pre", lambda: tr.Deny(anything(Opaque())),
                        PRE.format("Deny(reason=<opaque>)")),
    "pre ask reason": ("pre", lambda: tr.Ask(anything(Opaque())),
                       PRE.format("Ask(reason=<opaque>)")),
    "pre unhashable kind": ("pre", UnhashableKind, PRE.format("<unhashable kind>")),
    "around object": ("around", Opaque, AROUND.format("<opaque>")),
    "around unhashable kind": ("around", UnhashableKind, AROUND.format("<unhashable kind>")),
    "post object": ("post", Opaque, POST.format("<opaque>")),
    "post unhashable kind": ("post", UnhashableKind, POST.format("<unhashable kind>")),
    "post block feedback": ("post", lambda: tr.Block(anything(Opaque())),
                            POST.format("Block(feedback=<opaque>, contexts=())")),
    "post accept content": ("post", lambda: tr.Accept(content=anything([Opaque()])),
                            POST.format("Accept(content=[<opaque>])")),
    "post accept contexts": ("post", lambda: tr.Accept(contexts=anything(Opaque())),
                             POST.format("Accept(contexts=<opaque>)")),
    "guard object": ("guard", Opaque, "guard <named guard> returned <opaque>; a guard returns a "
                     "reason string to deny or None to abstain"),
    "approver object": ("approver", Opaque, APPROVER.format("<opaque>")),
    "approver unhashable kind": ("approver", UnhashableKind,
                                 APPROVER.format("<unhashable kind>")),
    "finalize object": ("finalize", Opaque, FINALIZE.format("<opaque>")),
    "finalize list": ("finalize", lambda: [Opaque()], FINALIZE.format("[<opaque>]")),
}


# Guards and finalize_content are synchronous: only the other stages have an async form.
RETURN_CASES = [
    pytest.param(stage, make, message, awaited, id=f"{key}-{'async' if awaited else 'sync'}")
    for key, (stage, make, message) in RETURNS.items()
    for awaited in (False, True)
    if not (awaited and stage in ("guard", "finalize"))
]


@pytest.mark.parametrize(("stage", "make", "message", "awaited"), RETURN_CASES)
async def test_an_unreadable_return_where_a_decision_was_due_is_that_stages_final_error(
    stage: str, make: Callable[[], Any], message: str, awaited: bool
) -> None:
    for result in await returning(stage, make, awaited).results():
        assert_error(result, message)


async def test_a_future_returned_by_an_observer_is_cancelled_even_if_cancel_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lab = Lab()
    futures: list[asyncio.Future[Any]] = []

    def observer(execution: tr.Execution, result: tr.ToolResult) -> Any:
        futures.append(CancelRaises())
        return futures[-1]

    lab.registry.on_result(observer)
    with caplog.at_level(logging.WARNING, "toolrail"):
        assert [r.value for r in await lab.results()] == ["ok"] * 4
    assert [r.getMessage() for r in caplog.records][:1] == [
        'tool "t" (c0): result observer failed: observers must be synchronous']
    assert len(caplog.records) == 4


# ---- issue 12.1 / 18.9: observers ----------------------------------------------------


@pytest.mark.parametrize("make", [Opaque, UnhashableKind, lambda: EqRaises("x")],
                         ids=["object", "unhashable kind", "str subclass"])
async def test_an_observer_returning_an_unreadable_object_changes_nothing(
    make: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    lab = Lab()
    lab.registry.on_result(anything(lambda e, r: make()))

    with caplog.at_level(logging.DEBUG, "toolrail"):
        assert [r.value for r in await lab.results()] == ["ok"] * 4
    assert caplog.records == []


@pytest.mark.parametrize(("exc", "shown"), [
    (Nameless, "Nameless"),
    (Liar, "Liar"),
    (lambda: OpaqueError("opaque"), "opaque"),
    (StrSubclassMessage, "sub message"),
], ids=["name raises", "name lies", "attributes raise", "str subclass message"])
async def test_an_observer_raising_an_exception_with_a_hostile_class_is_logged(
    exc: Callable[[], Exception], shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    lab = Lab()

    def observer(execution: tr.Execution, result: tr.ToolResult) -> None:
        raise exc()

    lab.registry.on_result(observer, prepend=True)
    with caplog.at_level(logging.WARNING, "toolrail"):
        assert [r.value for r in await lab.results()] == ["ok"] * 4
    assert [r.getMessage() for r in caplog.records] == [
        f'tool "t" ({i}): result observer failed: {shown}' for i in ("c0", "b0", "b1", "b2")]
    assert lab.notified[-1][1].value == "ok"  # the observers after it still ran


# ---- exceptions with hostile classes, from every stage -------------------------------

RAISED: dict[str, tuple[Callable[[], Exception], str, str | None, str]] = {
    "name raises": (Nameless, "Nameless", None, "Nameless"),
    "name lies": (Liar, "Liar", None, "Liar"),
    "attributes raise": (lambda: OpaqueError("opaque"), "opaque", None, "OpaqueError"),
    "tool error whose attributes raise": (  # its __str__ reads self.message
        lambda: OpaqueToolError("coded"), "<unprintable thrown value>", None, "OpaqueToolError"),
    "tool error with an unreadable code": (
        lambda: tr.ToolError("m", code=anything(Opaque())), "m", None, "ToolError"),
    "str subclass message": (StrSubclassMessage, "sub message", None, "StrSubclassMessage"),
    "str enum code": (lambda: tr.ToolError(Text.SLOW, code=Code.LIMIT), "slow down",
                      "RATE_LIMITED", "ToolError"),
}
STAGES = ["async body", "thread body", "inline body", "pre", "guard", "approver", "around",
          "post", "finalize"]


def raising(stage: str, exc: Callable[[], Exception]) -> Lab:
    def fail(*args: object) -> Any:
        raise exc()

    async def async_fail(*args: object) -> Any:
        await asyncio.sleep(0)
        raise exc()

    if stage == "async body":
        return Lab(async_fail)
    if stage in ("thread body", "inline body"):
        return Lab(fail, inline=stage == "inline body")
    if stage == "finalize":
        return Lab(finalize_content=fail)
    lab = Lab()
    if stage == "guard":
        lab.registry.guard(fail)
    else:
        at_stage(lab.registry, stage, async_fail)
    return lab


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(("exc", "message", "code", "kind"), RAISED.values(), ids=RAISED.keys())
async def test_an_exception_with_a_hostile_class_or_fields_is_an_error_result_of_plain_strs(
    stage: str, exc: Callable[[], Exception], message: str, code: str | None, kind: str
) -> None:
    for result in await raising(stage, exc).results():
        assert_error(result, message, code, kind)
        assert_plain(result)


# ---- issue 18.3: a deep context meta -------------------------------------------------


def deep_context() -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent("c"),), "s", deep_dict(1500))


def assert_deep_meta(context: tr.ContextMessage, depth: int) -> None:
    meta: Any = context.meta
    for _ in range(depth):
        assert type(meta) is tr.FrozenDict
        meta = meta["a"]
    assert meta == 0


@pytest.mark.parametrize("where", ["accept", "around", "deferred"])
async def test_a_context_with_a_deep_plain_dict_meta_is_kept_frozen(where: str) -> None:
    async def deferring(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        ctx.defer_context(deep_context())
        return "ok"

    lab = Lab(deferring if where == "deferred" else None)
    if where == "accept":
        lab.registry.post_execute(lambda e, r, n: tr.Accept(contexts=[deep_context()]))
    elif where == "around":
        async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
            result = await call_next()
            return tr.ToolResult(result.content, value=result.value, contexts=(deep_context(),))

        lab.registry.around_execute(around)

    for result in await lab.results():
        assert result.value == "ok"
        assert [c.source for c in result.contexts] == ["s"]
        assert_deep_meta(result.contexts[0], 1500)


# ---- issue 18.8: around-execute results with hostile fields --------------------------


def around_returning(make: Callable[[], tr.ToolResult]) -> Lab:
    lab = Lab()

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        await call_next()
        return make()

    lab.registry.around_execute(around)
    return lab


def context(source: str = "s") -> tr.ContextMessage:
    return tr.ContextMessage((tr.TextContent("c"),), source)


async def test_an_error_code_whose_eq_raises_is_read_by_its_plain_value() -> None:
    posted: list[str] = []
    lab = around_returning(lambda: tr.ToolResult(
        (tr.TextContent("Error: m"),), True,
        error=tr.ErrorInfo("m", EqRaises("RATE_LIMITED"))))
    lab.registry.post_execute(lambda e, r, n: noted(posted, e.call_id, n()))

    for result in await lab.results():
        assert_error(result, "m", "RATE_LIMITED")
        assert_plain(result)
    assert len(posted) == 4  # an ordinary dispatch result: post-execute saw it


async def test_an_error_code_that_is_not_a_str_gets_an_error_info_made_from_the_text() -> None:
    lab = around_returning(lambda: tr.ToolResult(
        (tr.TextContent("went wrong"),), True, error=tr.ErrorInfo("m", anything(Opaque()))))

    for result in await lab.results():
        assert result.error == tr.ErrorInfo("went wrong")


async def test_an_aborted_before_dispatch_code_whose_eq_raises_still_reads_as_that_code() -> None:
    posted: list[str] = []
    lab = around_returning(lambda: tr.ToolResult(
        (tr.TextContent("Error: tool call aborted before dispatch"),), True,
        error=tr.ErrorInfo("tool call aborted before dispatch",
                           EqRaises("ABORTED_BEFORE_DISPATCH"), "ToolAbortedError")))
    lab.registry.post_execute(lambda e, r, n: noted(posted, e.call_id, n()))

    for result in await lab.results():
        assert_error(result, "tool call aborted before dispatch", "ABORTED_BEFORE_DISPATCH",
                     "ToolAbortedError")
    assert posted == []  # ABORTED_BEFORE_DISPATCH skips post-execute


HOSTILE_FIELDS: dict[str, Callable[[], tr.ToolResult]] = {
    "contexts as a list subclass": lambda: tr.ToolResult(
        (tr.TextContent("x"),), value="x", contexts=anything(ListEqRaises([context()]))),
    "a context source whose eq raises": lambda: tr.ToolResult(
        (tr.TextContent("x"),), value="x", contexts=(context(EqRaises("s")),)),
    "a text whose eq raises": lambda: tr.ToolResult(
        (tr.TextContent(EqRaises("x")),), value="x", contexts=(context(),)),
    "content as a list subclass": lambda: tr.ToolResult(
        anything(ListEqRaises([tr.TextContent("x")])), value="x", contexts=(context(),)),
}


@pytest.mark.parametrize("make", HOSTILE_FIELDS.values(), ids=HOSTILE_FIELDS.keys())
async def test_an_around_result_with_fields_whose_eq_raises_is_materialized_plain(
    make: Callable[[], tr.ToolResult],
) -> None:
    for result in await around_returning(make).results():
        assert result.is_error is False
        assert result.value == "x"
        assert result.content == (tr.TextContent("x"),)
        assert result.contexts == (context(),)
        assert type(result.contexts) is tuple
        assert_plain(result)


async def test_a_block_whose_feedback_text_eq_raises_is_read_by_its_plain_value() -> None:
    lab = Lab()
    lab.registry.post_execute(
        lambda e, r, n: tr.Block([tr.TextContent(EqRaises("no")), tr.ImageContent("AA", "x/y")]))
    empty = Lab()
    empty.registry.post_execute(lambda e, r, n: tr.Block([tr.TextContent(EqRaises(""))]))

    for result in await lab.results():
        assert result.error == tr.ErrorInfo("no\n[image content]", "BLOCKED")
        assert_plain(result)
    for result in await empty.results():
        assert_error(result, "tool result blocked by post-execute policy", "BLOCKED")


# ---- issue 18.10: strict typed tools past json.dumps's limits ------------------------


def strict_lab(kind: Literal["int", "any"], classified: list[Any] | None = None) -> Lab:
    if kind == "int":
        @tr.tool(name="t", strict=True, concurrency_safe=True)
        async def number(n: int) -> str:
            return "ran"
        return Lab(number)

    def classify(n: Any) -> bool:
        assert classified is not None
        classified.append(n)
        return True

    @tr.tool(name="t", strict=True, concurrency_safe=classify)
    def nested(n: Any) -> str:
        return "ran"

    return Lab(nested)


async def test_a_strict_tool_given_an_int_too_long_to_print_is_invalid_args() -> None:
    for result in await strict_lab("int").results({"n": 10**4300}):  # 4 301 digits
        assert result.error is not None
        assert result.error.code == "INVALID_ARGS"
        assert result.error.type == "ToolArgsError"
        assert result.error.message.startswith("invalid arguments: ")


async def test_a_strict_tool_given_a_five_thousand_deep_argument_is_invalid_args() -> None:
    classified: list[Any] = []
    lab = strict_lab("any", classified)

    for result in await lab.results({"n": deep_list(5000)}):
        assert result.error is not None
        assert result.error.code == "INVALID_ARGS"
        assert result.error.message.startswith("invalid arguments: ")
    assert classified == []  # invalid arguments classify as EXCLUSIVE without the callable
    assert lab.registry.execution_mode(lab.call("c", {"n": deep_list(5000)})) is (
        tr.ExecutionMode.EXCLUSIVE)


async def test_a_strict_tool_still_accepts_long_ints_and_nesting_within_its_validator() -> None:
    for result in await strict_lab("int").results({"n": 10**4299}):
        assert result.value == "ran"
    for result in await strict_lab("any", []).results({"n": deep_list(100)}):
        assert result.value == "ran"


# ---- issue 18.11: results hold plain str ---------------------------------------------


def test_error_info_stores_str_subclasses_as_plain_str() -> None:
    info = tr.ErrorInfo(Text.SLOW, Code.LIMIT, SubStr("Kind"))

    assert info == tr.ErrorInfo("slow down", "RATE_LIMITED", "Kind")
    assert [type(v) for v in (info.message, info.code, info.type)] == [str, str, str]
    assert type(anything(tr.ErrorInfo(anything(Opaque())).message)) is Opaque  # not a str


PLAIN: dict[str, Callable[[], Lab]] = {
    "tool error with str enums": lambda: raising(
        "async body", lambda: tr.ToolError(Text.SLOW, code=Code.LIMIT)),
    "deny reason": lambda: returning("pre", lambda: tr.Deny(Text.SLOW)),
    "ask reason, no approver": lambda: returning("pre", lambda: tr.Ask(Text.SLOW)),
    "guard reason": lambda: returning("guard", lambda: Text.SLOW),
    "block feedback": lambda: returning("post", lambda: tr.Block(Text.SLOW)),
    "around error info": lambda: around_returning(lambda: tr.ToolResult(
        (tr.TextContent(Text.SLOW),), True, error=tr.ErrorInfo(Text.SLOW, Code.LIMIT))),
}


@pytest.mark.parametrize("make", PLAIN.values(), ids=PLAIN.keys())
async def test_a_str_enum_message_or_code_is_a_plain_str_in_the_result(
    make: Callable[[], Lab],
) -> None:
    for result in await make().results():
        assert result.error is not None
        assert result.error.message == "slow down"
        assert result.error.code in ("RATE_LIMITED", "DENIED", "BLOCKED")
        assert_plain(result)
        with pytest.raises(AttributeError):
            result.error.message.note = "changed"  # type: ignore[attr-defined]


# ---- siblings: the views and the run context -----------------------------------------


def test_execution_mode_of_an_unreadable_object_is_exclusive() -> None:
    assert Lab().registry.execution_mode(anything(Opaque())) is tr.ExecutionMode.EXCLUSIVE


@pytest.mark.parametrize(("message", "source", "shown"), [
    (Opaque(), None, "defer_context() takes a ContextMessage, a str, a Content or a sequence "
                     "of Content, got Opaque"),
    ([Opaque()], None, "defer_context() takes a ContextMessage, a str, a Content or a sequence "
                       "of Content, got list"),
    ("note", Opaque(), "source must be a str, got Opaque"),
], ids=["message", "message item", "source"])
async def test_defer_context_rejects_an_unreadable_message_or_source_with_a_type_error(
    message: Any, source: Any, shown: str
) -> None:
    raised: list[BaseException] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        try:
            ctx.defer_context(message, source=source)
        except Exception as exc:
            raised.append(exc)
        return "ok"

    for result in await Lab(body).results():
        assert result.value == "ok"
        assert result.contexts == ()
    assert [(type(e), str(e)) for e in raised] == [(TypeError, shown)] * 4


async def test_a_call_whose_name_and_id_compare_hostilely_runs_under_their_plain_values() -> None:
    lab = Lab()
    lab.name = anything(EqRaises("t"))

    results = await lab.results()

    assert [r.value for r in results] == ["ok"] * 4
    for call_id, _ in lab.notified:
        assert type(call_id) is str
    call = tr.ToolCall(call_id=EqRaises("c"), name=EqRaises("t"))
    assert (type(call.call_id), type(call.name)) == (str, str)
    assert lab.registry.execution_mode(call) is tr.ExecutionMode.PARALLEL


async def test_an_around_middleware_installing_an_unreadable_signal_gets_a_type_error() -> None:
    raised: list[BaseException] = []
    lab = Lab()

    async def around(execution: tr.Execution, call_next: CallNext) -> tr.ToolResult:
        try:
            execution.signal = anything(Opaque())
        except Exception as exc:
            raised.append(exc)
        return await call_next()

    lab.registry.around_execute(around)

    assert [r.value for r in await lab.results()] == ["ok"] * 4
    assert [(type(e), str(e)) for e in raised] == [
        (TypeError, "signal must be a CancelSignal, got Opaque")] * 4
