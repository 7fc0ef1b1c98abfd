"""Properties of ``execute``, ``run`` and ``snapshot_json`` over generated inputs.

* ``execute``: whatever generated pre-/around-/post-execute middleware, guards,
  approvers and bodies return, raise or how often they call ``call_next()``, a
  reference model of pipeline.md predicts the one frozen result and how often every
  middleware, guard, approver and body ran; each matching observer sees that very
  result exactly once; no call that a guard denies reaches its body.
* ``run``: a reference model of scheduler.md's pool predicts which bodies are running
  at every step of a generated batch (parallel and exclusive tools, denials, failures,
  ``max_parallel``, a batch cancellation); the test releases the running bodies' gates
  in a generated order (``asyncio.Event`` gates, never sleeps) and checks results,
  commit order, one-at-a-time ordered stages and the pool bound.
* ``snapshot_json``: JSON values round-trip; everything else is a ``ValueError``.

Each async scenario runs in its own ``asyncio.run`` so that every example gets a fresh
loop; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolrail as tr
from helpers import PostNext, one_turn, raw_tool, within

NAME = "t"
NOT_LOSSLESS = "tool call arguments must be losslessly JSON-serializable"
ABORTED = "tool call aborted"
ABORTED_BEFORE = "tool call aborted before dispatch"

PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def error(message: str, code: str | None = None, kind: str | None = None) -> tr.ToolResult:
    """An error result as the registry builds it."""
    return tr.ToolResult(
        (tr.TextContent("Error: " + message),), True, None, tr.ErrorInfo(message, code, kind)
    )


def success(value: str, *, concludes: bool = False) -> tr.ToolResult:
    return tr.ToolResult((tr.TextContent(value),), False, value, None, None, (), concludes)


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


def assert_frozen(result: tr.ToolResult) -> None:
    """A final result: frozen, lossless, consistent."""
    assert type(result) is tr.ToolResult
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.is_error = not result.is_error  # type: ignore[misc]
    assert type(result.content) is tuple
    assert all(type(block) in (tr.TextContent, tr.ImageContent) for block in result.content)
    assert type(result.contexts) is tuple
    assert all(type(c) is tr.ContextMessage for c in result.contexts)
    assert tr.snapshot_json(result.value) is result.value
    assert tr.snapshot_json(result.meta) is result.meta
    assert (result.error is not None) is result.is_error
    if result.is_error:
        assert result.value is None
        assert result.concludes_turn is False


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


# ---- run: a reference model of the pool --------------------------------------------

CALL_KINDS = ("ok", "fail", "pre_deny", "guard_deny")


@dataclass(frozen=True)
class Plan:
    kinds: tuple[str, ...]
    parallel: tuple[bool, ...]
    max_parallel: int
    priority: tuple[int, ...]  # the order in which running bodies are released
    cancel_at: int | None  # fire the batch signal after this many releases


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    n = draw(st.integers(1, 8))
    # Mostly parallel calls that reach their bodies, so that the pool fills up.
    kinds = draw(st.lists(st.sampled_from(CALL_KINDS[:1] * 3 + CALL_KINDS), min_size=n, max_size=n))
    parallel = draw(st.lists(st.sampled_from((True, True, True, False)), min_size=n, max_size=n))
    priority = draw(st.permutations(range(n)))
    cancel_at = draw(st.none() | st.integers(0, n))
    return Plan(tuple(kinds), tuple(parallel), draw(st.integers(1, 4)), tuple(priority), cancel_at)


class Pool:
    """scheduler.md's groups and pool, as a state machine the test advances."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.n = len(plan.kinds)
        self.started = 0
        self.cursor = 0
        self.parallel = False
        self.dispatching: set[int] = set()
        self.released: set[int] = set()
        self.settled: dict[int, tr.ToolResult] = {}
        self.prepared = 0  # calls whose prepare ran (started before the cancellation)
        self.results: list[tr.ToolResult] = []
        self.cancelled = False

    def advance(self) -> None:
        """Commit and start until only a release (or the cancellation) can move it on."""
        while self.cursor < self.n:
            if self.cursor in self.settled:
                result = self.settled.pop(self.cursor)
                if self.cancelled and not result.is_error:
                    result = error(ABORTED, "ABORTED", "ToolAbortedError")
                self.results.append(result)
                self.cursor += 1
            elif self.started < self.n and self.may_start():
                self.start(self.started)
            else:
                return

    def may_start(self) -> bool:
        index = self.started
        if self.cancelled:
            return True
        if index == self.cursor:
            self.parallel = self.plan.parallel[index]
            return True
        if not self.parallel or len(self.dispatching) >= self.plan.max_parallel:
            return False
        if self.plan.parallel[index]:
            return True
        self.parallel = False
        return False

    def start(self, index: int) -> None:
        self.started = index + 1
        kind = self.plan.kinds[index]
        if self.cancelled:
            self.settled[index] = error(
                ABORTED_BEFORE, "ABORTED_BEFORE_DISPATCH", "ToolAbortedError"
            )
            return
        self.prepared = index + 1
        if kind == "pre_deny":
            self.settled[index] = error(f"pre denies c{index}", "DENIED")
        elif kind == "guard_deny":
            self.settled[index] = error(f"guard denies c{index}", "DENIED")
        else:
            self.dispatching.add(index)

    def release(self, index: int) -> None:
        self.dispatching.remove(index)
        self.released.add(index)
        if self.plan.kinds[index] == "ok":
            self.settled[index] = success(f"ok{index}")
        else:
            self.settled[index] = error(f"c{index} failed", "BODY", "ToolError")

    def cancel(self) -> None:
        self.cancelled = True
        for index in self.dispatching:
            self.settled[index] = error(ABORTED, "ABORTED", "ToolAbortedError")
        self.dispatching.clear()


class Lab:
    """The real batch: gated bodies and middleware that log what happens, in order."""

    def __init__(self, plan: Plan) -> None:
        n = len(plan.kinds)
        self.plan = plan
        self.log: list[str] = []
        self.started = [asyncio.Event() for _ in range(n)]
        self.gates = [asyncio.Event() for _ in range(n)]
        self.finished = [asyncio.Event() for _ in range(n)]
        self.prepared = [asyncio.Event() for _ in range(n)]
        self.committed = [asyncio.Event() for _ in range(n)]
        self.notified: Counter[str] = Counter()
        self.running = 0
        self.peak = 0
        self.registry = registry = tr.ToolRegistry()
        for name, safe in (("par", True), ("exc", False)):
            registry.register(raw_tool(name, self.body, concurrency_safe=safe))
        registry.pre_execute(self.pre)
        registry.guard(self.guard)
        registry.post_execute(self.post)
        registry.on_result(self.observe)

    @staticmethod
    def index(execution: tr.Execution) -> int:
        return int(execution.call_id[1:])

    async def body(self, arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        i = self.index(ctx)
        self.log.append(f"body c{i}")
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started[i].set()
        try:
            await self.gates[i].wait()
        finally:
            self.running -= 1
            self.finished[i].set()
        if self.plan.kinds[i] == "fail":
            raise tr.ToolError(f"c{i} failed", code="BODY")
        return f"ok{i}"

    async def pre(self, execution: tr.Execution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        i = self.index(execution)
        self.log.append(f"pre-start c{i}")
        await one_turn()
        self.log.append(f"pre-end c{i}")
        self.prepared[i].set()
        if self.plan.kinds[i] == "pre_deny":
            return tr.Deny(f"pre denies c{i}")
        return await call_next()

    def guard(self, execution: tr.Execution) -> str | None:
        i = self.index(execution)
        return f"guard denies c{i}" if self.plan.kinds[i] == "guard_deny" else None

    async def post(
        self, execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> Any:
        i = self.index(execution)
        self.log.append(f"post-start c{i}")
        await one_turn()
        self.log.append(f"post-end c{i}")
        return await call_next()

    def observe(self, execution: tr.Execution, result: tr.ToolResult) -> None:
        i = self.index(execution)
        self.log.append(f"commit c{i}")
        self.notified[execution.call_id] += 1
        self.committed[i].set()

    async def reach(self, pool: Pool) -> None:
        """Wait until the real batch has done everything the model says it can do."""
        for i in range(pool.prepared):
            if self.plan.kinds[i] in ("pre_deny", "guard_deny"):
                await within(self.prepared[i].wait())
            else:
                await within(self.started[i].wait())
                if i in pool.released:
                    await within(self.finished[i].wait())
        for i in range(pool.cursor):
            await within(self.committed[i].wait())


def stage_events(log: list[str], stage: str, ids: list[int]) -> None:
    """The stage ran one call at a time (start, end, start, end...), in model order."""
    events = [e for e in log if e.startswith(stage + "-")]
    assert events == [f"{stage}-{edge} c{i}" for i in ids for edge in ("start", "end")]


async def run_plan(plan: Plan) -> None:
    n = len(plan.kinds)
    lab = Lab(plan)
    calls = [
        tr.ToolCall(call_id=f"c{i}", name="par" if plan.parallel[i] else "exc") for i in range(n)
    ]
    controller = tr.CancelController()
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(
        lab.registry.run(calls, max_parallel=plan.max_parallel, signal=controller.signal)
    )
    pool = Pool(plan)
    releases = 0
    while True:
        pool.advance()
        await lab.reach(pool)
        if plan.cancel_at == releases and not pool.cancelled and pool.cursor < n:
            controller.cancel()
            pool.cancel()
            continue
        if not pool.dispatching:
            break
        index = min(pool.dispatching, key=plan.priority.index)
        lab.gates[index].set()
        pool.release(index)
        releases += 1
    batch = await within(task)
    assert asyncio.all_tasks() - {asyncio.current_task()} <= before

    assert list(batch.results) == pool.results
    assert batch.cancelled is pool.cancelled
    assert batch.contexts == ()
    for result in batch.results:
        assert_frozen(result)
    assert lab.notified == Counter(f"c{i}" for i in range(n))
    assert [e for e in lab.log if e.startswith("commit")] == [f"commit c{i}" for i in range(n)]
    assert lab.peak <= plan.max_parallel
    stage_events(lab.log, "pre", list(range(pool.prepared)))
    aborted_before = [
        r.error is not None and r.error.code == "ABORTED_BEFORE_DISPATCH" for r in batch.results
    ]
    stage_events(lab.log, "post", [i for i in range(n) if not aborted_before[i]])
    for i in range(pool.prepared):
        if plan.parallel[i]:
            continue
        # An exclusive call is a group of one: everything before it has committed before
        # it starts, and nothing after it starts before it commits.
        first = lab.log.index(f"pre-start c{i}")
        last = lab.log.index(f"commit c{i}")
        assert all(
            not e.endswith(f" c{j}") for e in lab.log[first : last + 1] for j in range(n) if j != i
        )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_run_matches_the_pool_model_for_any_mix_and_settlement_order(plan: Plan) -> None:
    asyncio.run(run_plan(plan))


# ---- snapshot_json -----------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    pass


# JSON in other Python clothes: tuples, subclasses of str/int/float, other Mappings.
json_like = st.recursive(
    json_scalars
    | st.just(Color.RED)
    | st.just(Level.HIGH)
    | st.floats(allow_nan=False, allow_infinity=False).map(Ratio),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text() | st.just(Color.RED), inner, max_size=4)
        | st.dictionaries(st.text(), inner, max_size=3).map(
            lambda d: cast(Mapping[str, Any], _ReadOnly(d))
        )
    ),
    max_leaves=25,
)


class _ReadOnly(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def assert_deep_frozen(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is tr.FrozenDict:
            assert all(type(k) is str for k in item)
            stack.extend(item.values())
        elif type(item) is tuple:
            stack.extend(item)
        else:
            assert item is None or type(item) in (bool, int, float, str)
            assert type(item) is not float or math.isfinite(item)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_snapshot_json_round_trips_every_json_value(value: Any) -> None:
    frozen = tr.snapshot_json(value)
    assert json.loads(json.dumps(frozen)) == value
    assert tr.thaw(frozen) == value
    assert tr.snapshot_json(frozen) is frozen
    assert_deep_frozen(frozen)


@settings(max_examples=200, deadline=None)
@given(json_like)
def test_snapshot_json_accepts_json_in_other_python_clothes_as_its_plain_form(value: Any) -> None:
    frozen = tr.snapshot_json(value)
    assert_deep_frozen(frozen)
    plain = json.loads(json.dumps(value, default=dict))
    assert json.loads(json.dumps(frozen)) == plain


class Opaque:
    """An object whose every protocol raises."""

    def _boom(self, *args: object) -> Any:
        raise RuntimeError("opaque")

    __eq__ = __hash__ = __str__ = __repr__ = __iter__ = __len__ = _boom


class Unreadable(dict[str, Any]):
    def _boom(self, *args: object) -> Any:
        raise RuntimeError("unreadable")

    items = keys = values = __iter__ = __len__ = _boom


def cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


non_json_leaves = st.one_of(
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.integers(), max_size=3),
    st.binary(max_size=4),
    st.binary(max_size=4).map(bytearray),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.dictionaries(
        st.integers()
        | st.none()
        | st.booleans()
        | st.tuples(st.integers())
        | st.floats(allow_nan=False),
        json_scalars,
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(
        [
            decimal.Decimal("1.5"),
            datetime.datetime(2020, 1, 1),
            object(),
            len,
            Ratio("nan"),
            complex(1, 2),
        ]
    ),
    st.builds(Opaque),
    st.builds(Unreadable, st.just({"a": 1})),
    st.builds(cyclic),
    st.tuples(st.sets(st.integers(), min_size=1, max_size=2)),
)


def _insert(parts: tuple[list[Any], Any, int]) -> list[Any]:
    items, bad, at = parts
    items.insert(min(at, len(items)), bad)
    return items


def _put(parts: tuple[dict[str, Any], str, Any]) -> dict[str, Any]:
    items, key, bad = parts
    items[key] = bad
    return items


non_json = st.recursive(
    non_json_leaves,
    lambda inner: st.one_of(
        st.tuples(st.lists(json_values, max_size=3), inner, st.integers(0, 3)).map(_insert),
        st.tuples(st.lists(json_values, max_size=3), inner).map(
            lambda parts: (*parts[0], parts[1])
        ),
        st.tuples(st.dictionaries(st.text(), json_values, max_size=3), st.text(), inner).map(_put),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(non_json)
def test_snapshot_json_rejects_everything_else_with_value_error_only(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^value is not lossless JSON: \$"):
        tr.snapshot_json(value)
