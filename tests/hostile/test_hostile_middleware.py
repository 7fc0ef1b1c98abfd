"""Hostile and garbage returns from middleware, guards, approvers and finalize content
through ``execute``: each gives the error result pipeline.md names; every call is
bounded by ``asyncio.wait_for(..., 5)``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import toolrail as tr
from hostile_helpers import (
    INVALID,
    RESULT_NOT_LOSSLESS,
    Hostile,
    HostileList,
    HostileStr,
    Lab,
    NamedGuard,
    anything,
    assert_error,
    at_stage,
    call,
    contained,
)

CallNext = Callable[[], Awaitable[Any]]


class HostileResult(tr.ToolResult):
    """A ToolResult whose every attribute read raises."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


@contextlib.contextmanager
def no_coroutine_left_unawaited() -> Iterator[None]:
    """Fail if a coroutine is dropped without being awaited or closed (warnings are errors)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    never = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert never == []


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

    lab = Lab()
    at_stage(lab.registry, stage, wrapped if awaited else plain)
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
