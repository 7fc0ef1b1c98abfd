"""Properties of ``execute`` over generated middleware stacks (spec: pipeline.md).

Whatever generated pre-/around-/post-execute middleware, guards, approvers and bodies
return, raise or how often they call ``call_next()``, a reference model of pipeline.md
predicts the one frozen result and how often every middleware, guard, approver and body
ran; each matching observer sees that very result exactly once; no call that a guard
denies reaches its body. ``run``: test_properties_run.py; ``snapshot_json``:
test_properties_json.py.

Each async scenario runs in its own ``asyncio.run`` so that every example gets a fresh
loop; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrail as tr
from helpers import assert_frozen, error, one_turn, raw_tool, success, within

NAME = "t"


NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"


PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def quiet_logger(records: list[logging.LogRecord]) -> logging.Logger:
    """A logger of its own per example, collecting what the registry logs."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(f"toolrail.properties.{id(records)}")
    logger.handlers[:] = [Collect()]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


# ---- execute: generated middleware stacks ------------------------------------------

PRE_KINDS = ("delegate", "allow", "deny", "ask", "ask_reason", "garbage", "raise")


AROUND_KINDS = ("delegate", "fresh", "fresh_error", "garbage", "raise")


POST_KINDS = ("delegate", "accept", "content", "value", "block", "both", "garbage", "raise")


GUARD_KINDS = ("abstain", "deny", "garbage", "raise")


APPROVER_KINDS = ("none", "allowed-once", "rejected", "cancelled", "unavailable", "bogus", "raise")


BODY_KINDS = ("ok", "fail", "invalid", "self_cancel")


OBSERVER_KINDS = ("plain", "raise", "coroutine", "other_scope", "all_scopes")


PRE_GARBAGE: tuple[object, ...] = (None, 42, "allow", tr.Accept(), tr.Deny(cast(str, 7)))


AROUND_GARBAGE: tuple[object, ...] = (None, 42, "result", tr.Allow())


POST_GARBAGE: tuple[object, ...] = (None, 42, tr.Allow(), tr.Accept(content=cast(str, 5)))


@dataclass(frozen=True)
class Step:
    """One generated middleware: what it decides after awaiting ``call_next`` ``calls`` times."""

    kind: str
    calls: int
    sync: bool  # a plain function (then it awaits nothing, or returns call_next() itself)
    garbage: int


@dataclass(frozen=True)
class Stack:
    bad_arguments: bool
    pre: tuple[Step, ...]
    approver: str
    approver_sync: bool
    guards: tuple[str, ...]
    around: tuple[Step, ...]
    body: str
    defers: bool
    concludes: bool
    post: tuple[Step, ...]
    observers: tuple[str, ...]


def step_lists(kinds: tuple[str, ...], garbage: int) -> st.SearchStrategy[tuple[Step, ...]]:
    @st.composite
    def step(draw: st.DrawFn) -> Step:
        kind = draw(st.sampled_from(kinds))
        calls = draw(st.integers(0, 2))
        sync = draw(st.booleans()) and (calls == 0 or (calls == 1 and kind == "delegate"))
        return Step(kind, calls, sync, draw(st.integers(0, garbage - 1)))

    return st.lists(step(), max_size=3).map(tuple)


stacks = st.builds(
    Stack,
    bad_arguments=st.integers(0, 9).map(lambda i: i == 0),
    pre=step_lists(PRE_KINDS, len(PRE_GARBAGE)),
    approver=st.sampled_from(APPROVER_KINDS),
    approver_sync=st.booleans(),
    guards=st.lists(st.sampled_from(GUARD_KINDS), max_size=3).map(tuple),
    around=step_lists(AROUND_KINDS, len(AROUND_GARBAGE)),
    body=st.sampled_from(BODY_KINDS),
    defers=st.booleans(),
    concludes=st.booleans(),
    post=step_lists(POST_KINDS, len(POST_GARBAGE)),
    observers=st.lists(st.sampled_from(OBSERVER_KINDS), max_size=4).map(tuple),
)


class ModelFinal(Exception):
    """A final error in the model: ``error(message, None, kind)``."""

    def __init__(self, message: str, kind: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


class NamedGuard:
    """A guard with a stable ``repr`` (the invalid-return message quotes it)."""

    def __init__(self, index: int, kind: str, hits: Counter[str]) -> None:
        self.index = index
        self.kind = kind
        self.hits = hits

    def __call__(self, execution: tr.Execution) -> Any:
        self.hits[f"guard{self.index}"] += 1
        if self.kind == "deny":
            return f"guard{self.index} denies"
        if self.kind == "garbage":
            return 42
        if self.kind == "raise":
            raise RuntimeError(f"guard{self.index} failed")
        return None

    def __repr__(self) -> str:
        return f"<guard {self.index}>"


# The model: pipeline.md, stage by stage, for one generated stack.


class Model:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.hits: Counter[str] = Counter()
        self.deferred = 0  # body invocations that deferred a context

    def pre(self, i: int) -> object:
        steps = self.stack.pre
        if i == len(steps):
            return tr.Allow()
        step = steps[i]
        self.hits[f"pre{i}"] += 1
        last: object = None
        for _ in range(step.calls):
            last = self.pre(i + 1)
        kind = step.kind
        out: object
        if kind == "delegate":
            out = last if step.calls else tr.Allow()
        elif kind == "allow":
            out = tr.Allow()
        elif kind == "deny":
            out = tr.Deny(f"pre{i} denies")
        elif kind == "ask":
            out = tr.Ask()
        elif kind == "ask_reason":
            out = tr.Ask(f"pre{i} asks")
        elif kind == "garbage":
            out = PRE_GARBAGE[step.garbage]
        else:
            raise ModelFinal(f"pre{i} failed", "RuntimeError")
        if type(out) is tr.Allow or (type(out) is tr.Ask and out.reason is None):
            return out
        if isinstance(out, tr.Deny | tr.Ask) and isinstance(out.reason, str):
            return out
        raise ModelFinal(f"pre-execute middleware returned {out!r}, not Allow, Deny or Ask", None)

    def approve(self, ask: tr.Ask) -> object:
        kind = self.stack.approver
        if kind == "none":
            return tr.Deny(
                ask.reason
                if ask.reason is not None
                else f'tool "{NAME}" requires approval, but no approver is configured'
            )
        self.hits["approver"] += 1
        if kind == "raise":
            raise ModelFinal("approver failed", "RuntimeError")
        if kind == "bogus":
            raise ModelFinal("approver returned an invalid outcome: 'bogus'", None)
        return {
            "allowed-once": tr.Allow(),
            "rejected": tr.Deny(f'the user rejected tool "{NAME}"'),
            "cancelled": tr.Deny(f'approval for tool "{NAME}" was cancelled'),
            "unavailable": tr.Deny(
                f'tool "{NAME}" requires approval, but no approval channel is available'
            ),
        }[kind]

    def guards(self) -> str | None:
        for j, kind in enumerate(self.stack.guards):
            self.hits[f"guard{j}"] += 1
            if kind == "deny":
                return f"guard{j} denies"
            if kind == "garbage":
                raise ModelFinal(
                    f"guard <guard {j}> returned 42; a guard returns a reason string to deny "
                    "or None to abstain",
                    None,
                )
            if kind == "raise":
                raise ModelFinal(f"guard{j} failed", "RuntimeError")
        return None

    def body(self) -> tr.ToolResult:
        self.hits["body"] += 1
        if self.stack.defers:
            self.deferred += 1
        kind = self.stack.body
        if kind == "ok":
            return success("ok", concludes=self.stack.concludes)
        if kind == "fail":
            return error("body failed", "BODY", "ToolError")
        if kind == "invalid":
            return error(
                f'tool "{NAME}" returned invalid output: value is not lossless JSON: $ is a set',
                "INVALID_TOOL_OUTPUT",
                "ToolOutputError",
            )
        return error("CancelledError", None, "CancelledError")

    def around(self, i: int) -> tr.ToolResult:
        steps = self.stack.around
        if i == len(steps):
            return self.body()
        step = steps[i]
        self.hits[f"around{i}"] += 1
        last: tr.ToolResult | None = None
        for _ in range(step.calls):
            last = self.around(i + 1)
        kind = step.kind
        if kind == "delegate" and last is not None:
            return last
        if kind in ("delegate", "fresh"):
            return fresh(i)
        if kind == "fresh_error":
            return fresh_error(i)
        if kind == "garbage":
            raise ModelFinal(
                f"around-execute middleware returned "
                f"{AROUND_GARBAGE[step.garbage]!r}, not a ToolResult",
                None,
            )
        raise ModelFinal(f"around{i} failed", "RuntimeError")

    def post(self, i: int) -> object:
        steps = self.stack.post
        if i == len(steps):
            return tr.Accept()
        step = steps[i]
        self.hits[f"post{i}"] += 1
        last: object = None
        for _ in range(step.calls):
            last = self.post(i + 1)
        if step.kind == "raise":
            raise ModelFinal(f"post{i} failed", "RuntimeError")
        out = post_decision(i, step, last)
        if step.kind == "garbage":
            raise ModelFinal(f"post-execute middleware returned {out!r}, not Accept or Block", None)
        return out

    def apply(self, decision: object, result: tr.ToolResult) -> tr.ToolResult:
        if isinstance(decision, tr.Block):
            feedback = cast(str, decision.feedback)
            return tr.ToolResult(
                (tr.TextContent(feedback),), True, None, tr.ErrorInfo(feedback, "BLOCKED")
            )
        assert isinstance(decision, tr.Accept)
        has_value = decision.value is not tr.Accept().value
        if has_value and decision.content is not None:
            raise ModelFinal("post-execute Accept cannot replace both value and content", None)
        if has_value:
            if result.is_error:
                raise ModelFinal("post-execute cannot replace the value of a failed result", None)
            return dataclasses.replace(
                result, value=decision.value, content=(tr.TextContent(decision.value),)
            )
        if decision.content is not None:
            content = cast(str, decision.content)
            return dataclasses.replace(result, content=(tr.TextContent(content),))
        return result

    def outcome(self) -> tr.ToolResult:
        """The result ``execute`` must return."""
        if self.stack.bad_arguments:
            return error(NOT_LOSSLESS)
        try:
            decision = self.pre(0)
            if isinstance(decision, tr.Ask):
                decision = self.approve(decision)
            if isinstance(decision, tr.Deny):
                result = error(decision.reason, "DENIED")
            else:
                reason = self.guards()
                if reason is not None:
                    result = error(reason, "DENIED")
                else:
                    result = self.around(0)
                    note = tr.ContextMessage((tr.TextContent("note"),), NAME)
                    result = dataclasses.replace(
                        result, contexts=(note,) * self.deferred + result.contexts
                    )
            result = self.apply(self.post(0), result)
        except ModelFinal as final:
            return error(final.message, None, final.kind)
        return materialized(result)


def fresh(i: int) -> tr.ToolResult:
    """A success an around-execute middleware builds, with a context of its own."""
    own = tr.ContextMessage((tr.TextContent(f"around{i} context"),), "around")
    return tr.ToolResult((tr.TextContent(f"around{i}"),), value=f"around{i}", contexts=(own,))


def fresh_error(i: int) -> tr.ToolResult:
    """An inconsistent failure an around-execute middleware builds (no ``error``, a value)."""
    return tr.ToolResult(
        (tr.TextContent(f"around{i} failed"),), True, "dropped", concludes_turn=True
    )


def post_decision(i: int, step: Step, last: object) -> object:
    kind = step.kind
    if kind == "delegate":
        return last if step.calls else tr.Accept()
    if kind == "accept":
        return tr.Accept()
    if kind == "content":
        return tr.Accept(content=f"post{i}")
    if kind == "value":
        return tr.Accept(value=f"pv{i}")
    if kind == "block":
        return tr.Block(f"blocked by post{i}")
    if kind == "both":
        return tr.Accept(content="c", value="v")
    if kind == "garbage":
        return POST_GARBAGE[step.garbage]
    raise RuntimeError(f"post{i} failed")


def materialized(result: tr.ToolResult) -> tr.ToolResult:
    """Stage 11's invariants."""
    if result.is_error:
        info = result.error
        if info is None:
            info = tr.ErrorInfo(
                "\n".join(b.text for b in result.content if isinstance(b, tr.TextContent))
            )
        return dataclasses.replace(result, value=None, error=info, concludes_turn=False)
    return dataclasses.replace(result, error=None)


# The real stack: the same behaviours as middleware, guards, approver, body, observers.


def pre_middleware(i: int, step: Step, hits: Counter[str]) -> Callable[..., Any]:
    def decide(last: object) -> object:
        kind = step.kind
        if kind == "delegate":
            return last if step.calls else tr.Allow()
        if kind == "raise":
            raise RuntimeError(f"pre{i} failed")
        return {
            "allow": tr.Allow(),
            "deny": tr.Deny(f"pre{i} denies"),
            "ask": tr.Ask(),
            "ask_reason": tr.Ask(f"pre{i} asks"),
            "garbage": PRE_GARBAGE[step.garbage],
        }[kind]

    if step.sync:

        def sync_pre(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> object:
            hits[f"pre{i}"] += 1
            return call_next() if step.calls else decide(None)

        return sync_pre

    async def async_pre(execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> object:
        hits[f"pre{i}"] += 1
        await one_turn()
        last: object = None
        for _ in range(step.calls):
            last = await call_next()
        return decide(last)

    return async_pre


def around_middleware(i: int, step: Step, hits: Counter[str]) -> Callable[..., Any]:
    def decide(last: tr.ToolResult | None) -> object:
        kind = step.kind
        if kind == "delegate" and last is not None:
            return last
        if kind in ("delegate", "fresh"):
            return fresh(i)
        if kind == "fresh_error":
            return fresh_error(i)
        if kind == "garbage":
            return AROUND_GARBAGE[step.garbage]
        raise RuntimeError(f"around{i} failed")

    if step.sync:

        def sync_around(
            execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
        ) -> object:
            hits[f"around{i}"] += 1
            return call_next() if step.calls else decide(None)

        return sync_around

    async def async_around(
        execution: tr.Execution, call_next: Callable[[], Awaitable[tr.ToolResult]]
    ) -> object:
        hits[f"around{i}"] += 1
        await one_turn()
        last = None
        for _ in range(step.calls):
            last = await call_next()
        return decide(last)

    return async_around


def post_middleware(i: int, step: Step, hits: Counter[str]) -> Callable[..., Any]:
    if step.sync:

        def sync_post(
            execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Awaitable[Any]]
        ) -> object:
            hits[f"post{i}"] += 1
            return call_next() if step.calls else post_decision(i, step, None)

        return sync_post

    async def async_post(
        execution: tr.Execution, result: tr.ToolResult, call_next: Callable[[], Awaitable[Any]]
    ) -> object:
        hits[f"post{i}"] += 1
        await one_turn()
        last: object = None
        for _ in range(step.calls):
            last = await call_next()
        return post_decision(i, step, last)

    return async_post


def approver_for(stack: Stack, hits: Counter[str]) -> tr.Approver | None:
    kind = stack.approver
    if kind == "none":
        return None

    def answer() -> str:
        hits["approver"] += 1
        if kind == "raise":
            raise RuntimeError("approver failed")
        return kind

    if stack.approver_sync:
        return lambda request: answer()

    async def approver(request: tr.ApprovalRequest) -> str:
        await one_turn()
        return answer()

    return approver


async def nothing() -> None:
    """What an observer that wrongly returns a coroutine returns (the registry closes it)."""


async def execute_stack(stack: Stack) -> None:
    hits: Counter[str] = Counter()
    records: list[logging.LogRecord] = []
    registry = tr.ToolRegistry(logger=quiet_logger(records), approver=approver_for(stack, hits))

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> object:
        hits["body"] += 1
        if stack.defers:
            ctx.defer_context("note")
        await one_turn()
        if stack.body == "fail":
            raise tr.ToolError("body failed", code="BODY")
        if stack.body == "invalid":
            return {1, 2}
        if stack.body == "self_cancel":
            raise asyncio.CancelledError
        if stack.concludes:
            ctx.conclude_turn()
        return "ok"

    registry.register(
        tr.Tool(name=NAME, description="d", parameters={"type": "object"}, execute=body)
    )
    for i, step in enumerate(stack.pre):
        registry.pre_execute(pre_middleware(i, step, hits))
    for j, kind in enumerate(stack.guards):
        registry.guard(NamedGuard(j, kind, hits))
    for i, step in enumerate(stack.around):
        registry.around_execute(around_middleware(i, step, hits))
    for i, step in enumerate(stack.post):
        registry.post_execute(post_middleware(i, step, hits))

    seen: list[list[tuple[tr.Execution, tr.ToolResult]]] = []
    expected_seen: list[bool] = []
    for kind in stack.observers:
        log: list[tuple[tr.Execution, tr.ToolResult]] = []
        seen.append(log)

        def observer(
            execution: tr.Execution,
            result: tr.ToolResult,
            log: list[tuple[tr.Execution, tr.ToolResult]] = log,
            kind: str = kind,
        ) -> Any:
            log.append((execution, result))
            if kind == "raise":
                raise RuntimeError("observer failed")
            return nothing() if kind == "coroutine" else None

        if kind == "other_scope":
            registry.scope("other").on_result(observer)
        elif kind == "all_scopes":
            registry.scope("watcher").on_result(observer, all_scopes=True)
        else:
            registry.on_result(observer)
        expected_seen.append(kind != "other_scope")

    arguments: Any = {"bad": {1}} if stack.bad_arguments else {"x": 1}
    call = tr.ToolCall(call_id="c1", name=NAME, arguments=arguments)
    before = asyncio.all_tasks()
    result = await within(registry.execute(call))
    assert asyncio.all_tasks() <= before

    model = Model(stack)
    assert result == model.outcome()
    assert_frozen(result)
    assert hits == model.hits
    if any(kind != "abstain" for kind in stack.guards):
        assert hits["body"] == 0  # a guard that denies, raises or misbehaves stops the call
    for log, expected in zip(seen, expected_seen, strict=True):
        assert len(log) == (1 if expected else 0)
        for execution, observed in log:
            assert observed is result
            assert execution.call_id == "c1"
    failed = sum(1 for kind in stack.observers if kind in ("raise", "coroutine"))
    assert len(records) == failed


@PROPERTY
@given(stacks)
def test_every_execute_returns_the_one_frozen_result_the_pipeline_model_predicts(
    stack: Stack,
) -> None:
    asyncio.run(execute_stack(stack))


@dataclass(frozen=True)
class GuardOrder:
    pre: tuple[str, ...]  # "allow" | "ask" | "delegate" per middleware
    approver: str
    guards: tuple[str, ...]
    cancel: bool


@settings(max_examples=150, deadline=None)
@given(
    st.builds(
        GuardOrder,
        pre=st.lists(
            st.sampled_from(("allow", "ask", "delegate", "delegate_twice")), max_size=3
        ).map(tuple),
        approver=st.sampled_from(("allowed-once", "none")),
        guards=st.lists(
            st.sampled_from(("abstain", "deny", "raise", "garbage")), min_size=1, max_size=4
        )
        .map(tuple)
        .filter(lambda g: any(k != "abstain" for k in g)),
        cancel=st.booleans(),
    )
)
def test_no_ordering_of_pre_execute_guards_and_approval_lets_a_denied_call_reach_its_body(
    order: GuardOrder,
) -> None:
    async def scenario() -> None:
        ran: list[str] = []
        hits: Counter[str] = Counter()
        controller = tr.CancelController()
        approver = None if order.approver == "none" else (lambda request: "allowed-once")
        registry = tr.ToolRegistry(approver=approver)

        async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
            ran.append(ctx.call_id)
            return "ran"

        registry.register(raw_tool(NAME, body, concurrency_safe=True))
        for kind in order.pre:

            async def pre(
                execution: tr.Execution, call_next: Callable[[], Awaitable[Any]], kind: str = kind
            ) -> object:
                await one_turn()
                if kind == "ask":
                    return tr.Ask()
                if kind.startswith("delegate"):
                    if kind == "delegate_twice":
                        await call_next()
                    if order.cancel:
                        controller.cancel()  # cancellation racing the decision changes nothing
                    return await call_next()
                return tr.Allow()

            registry.pre_execute(pre)
        for j, kind in enumerate(order.guards):
            registry.guard(NamedGuard(j, kind, hits))

        signal = controller.signal
        results = [
            await within(registry.execute(tr.ToolCall(call_id="one", name=NAME, signal=signal)))
        ]
        calls = [tr.ToolCall(call_id=f"b{i}", name=NAME, signal=signal) for i in range(3)]
        batch = await within(registry.run(calls, max_parallel=3))
        results.extend(batch.results)
        assert ran == []
        assert all(result.is_error for result in results)

    asyncio.run(scenario())
