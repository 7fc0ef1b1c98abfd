"""The execute pipeline, stages 5 and 6: guards and the denial they lead to (spec:
pipeline.md, "Stages")."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable
from typing import Any, cast

import pytest

import toolrail as tr
from helpers import (
    GUARD_HINT,
    NamedGuard,
    PostNext,
    PreNext,
    Reason,
    Recorder,
    Unprintable,
    appended,
    assert_error,
    assert_final_error,
    install_every_stage,
    make_call,
    make_tool,
    recording_body,
)

# ---- stage 5: guards ----------------------------------------------------------------


async def test_guards_run_only_when_the_decision_is_allow(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool())
    registry.guard(lambda execution: log(f"guard:{execution.call_id}"))

    def pre(execution: tr.Execution, call_next: PreNext) -> Any:
        if execution.call_id == "deny":
            return tr.Deny("no")
        if execution.call_id == "ask":
            return tr.Ask()
        return call_next()

    registry.pre_execute(pre)
    await registry.execute(make_call(call_id="deny"))
    await registry.execute(make_call(call_id="ask"))
    await registry.execute(make_call(call_id="allow"))

    assert log.events == ["guard:allow"]


async def test_every_global_guard_runs_in_order_before_the_scopes_guards(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    def guard(label: str) -> Callable[[tr.Execution], None]:
        return lambda execution: log(label)

    registry.register(make_tool())
    scope = registry.scope("agent")
    scope.guard(guard("s1"))
    registry.guard(guard("g1"))
    scope.guard(guard("s2"))
    registry.guard(guard("g2"))
    registry.scope("other").guard(guard("other"))

    result = await scope.execute(make_call())
    await registry.execute(make_call())

    assert result.value == "ok"
    assert log.events == ["g1", "g2", "s1", "s2", "g1", "g2"]


async def test_the_first_guard_reason_denies_and_later_guards_do_not_run(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.guard(lambda execution: log("g1"))
    registry.guard(lambda execution: log.then("g2", "no writes under /etc"))
    registry.guard(lambda execution: log.then("g3", "another reason"))

    result = await registry.execute(make_call())

    assert_error(result, "no writes under /etc", "DENIED")
    assert log.events == ["g1", "g2"]


async def test_an_empty_string_from_a_guard_still_denies(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    registry.guard(lambda execution: "")
    registry.guard(lambda execution: log("later guard"))

    result = await registry.execute(make_call())

    assert_error(result, "", "DENIED")
    assert log.events == []


async def test_a_guard_reason_that_is_a_str_subclass_denies_with_its_text(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.guard(lambda execution: Reason.BUSY)

    result = await registry.execute(make_call())

    assert_error(result, "the tool is busy", "DENIED")
    assert type(cast(tr.ErrorInfo, result.error).message) is str


async def test_a_guard_denial_goes_on_to_post_execute_but_skips_dispatch(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(lambda execution: "denied by guard")
    registry.post_execute(lambda execution, result, call_next: appended(seen, result, tr.Accept()))

    result = await registry.execute(make_call())

    assert_error(result, "denied by guard", "DENIED")
    assert [r.error for r in seen] == [tr.ErrorInfo("denied by guard", "DENIED")]
    assert log.events == ["pre", "guard", "post", "observer"]


class BadReprGuard(NamedGuard):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("verdict", [5, b"no", True, ["no"], tr.Deny("no")])
async def test_a_guard_returning_neither_none_nor_a_str_is_a_final_error(
    registry: tr.ToolRegistry, log: Recorder, verdict: Any
) -> None:
    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(NamedGuard(verdict))

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard NamedGuard() returned {verdict!r}; {GUARD_HINT}")
    assert log.events == ["pre", "guard", "observer"]


async def test_an_invalid_guard_return_names_a_plain_function_guard_by_its_repr(
    registry: tr.ToolRegistry,
) -> None:
    def no_numbers(execution: tr.Execution) -> Any:
        return 42

    registry.register(make_tool())
    registry.guard(no_numbers)

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard {no_numbers!r} returned 42; {GUARD_HINT}")


async def test_an_invalid_guard_return_names_a_guard_whose_repr_fails_by_its_type(
    registry: tr.ToolRegistry,
) -> None:
    registry.register(make_tool())
    registry.guard(BadReprGuard(5))

    result = await registry.execute(make_call())

    assert_final_error(result, f"guard <BadReprGuard object> returned 5; {GUARD_HINT}")


async def test_an_async_guard_is_a_final_error_and_its_coroutine_is_closed(
    registry: tr.ToolRegistry,
) -> None:
    coroutines: list[Any] = []

    async def verdict() -> None:
        return None

    def async_guard(execution: tr.Execution) -> Any:
        coroutine = verdict()
        coroutines.append(coroutine)
        return coroutine

    registry.register(make_tool())
    registry.guard(async_guard)

    result = await registry.execute(make_call())

    (coroutine,) = coroutines
    assert_final_error(result, f"guard {async_guard!r} returned {coroutine!r}; {GUARD_HINT}")
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    coroutines.clear()
    del coroutine
    gc.collect()  # a never-awaited coroutine would warn here (warnings are errors)


@pytest.mark.parametrize(
    ("exc", "message", "code", "type_name"),
    [
        (RuntimeError("guard broke"), "guard broke", None, "RuntimeError"),
        (tr.ToolError("quota", code="QUOTA"), "quota", "QUOTA", "ToolError"),
        (Unprintable(), "<unprintable thrown value>", None, "Unprintable"),
    ],
)
async def test_a_raising_guard_is_a_final_error_with_its_message(
    registry: tr.ToolRegistry,
    log: Recorder,
    exc: Exception,
    message: str,
    code: str | None,
    type_name: str,
) -> None:
    def guard(execution: tr.Execution) -> None:
        raise exc

    registry.register(make_tool(execute=recording_body(log)))
    install_every_stage(registry, log)
    registry.guard(guard)

    result = await registry.execute(make_call())

    assert_final_error(result, message, code, type_name)
    assert log.events == ["pre", "guard", "observer"]


# ---- stage 6: denial ----------------------------------------------------------------


async def test_a_denial_skips_dispatch_and_post_execute_sees_the_denial_result(
    registry: tr.ToolRegistry, log: Recorder
) -> None:
    seen: list[tr.ToolResult] = []

    async def post(execution: tr.Execution, result: tr.ToolResult, call_next: PostNext) -> Any:
        seen.append(result)
        return await call_next()

    registry.register(make_tool(execute=recording_body(log)))
    registry.around_execute(lambda execution, call_next: log.then("around", call_next()))
    registry.pre_execute(lambda execution, call_next: tr.Deny("blocked path"))
    registry.post_execute(post)

    result = await registry.execute(make_call())

    assert log.events == []
    (denial,) = seen
    assert_error(denial, "blocked path", "DENIED")
    assert result == denial
