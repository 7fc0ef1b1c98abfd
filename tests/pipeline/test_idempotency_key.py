"""``Execution.idempotency_key`` and ``durable_id`` as the body, middleware and observers
see them (issue 35, item 5; writing-tools.md, "Idempotency keys")."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from helpers import AroundNext, PostNext, PreNext, make_call, make_tool

ARGUMENTS = {"amount": 1250, "to": "acct_é", "lines": [{"sku": "a", "qty": 2}]}


def documented(call_id: str, name: str, *arguments: Any) -> str:
    """The documented form of a plain call's key, computed here from plain JSON."""
    text = json.dumps([call_id, name, *arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


async def key_body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
    return ctx.idempotency_key


async def key_of(call: tr.ToolCall) -> str:
    registry = tr.ToolRegistry()
    registry.register(make_tool("charge", key_body))
    result = await registry.execute(call)
    assert result.error is None
    assert isinstance(result.value, str)
    return result.value


async def test_a_plain_calls_key_is_the_sha256_of_its_call_id_name_and_arguments() -> None:
    key = await key_of(make_call("charge", "call_1", ARGUMENTS))
    assert key == documented("call_1", "charge", ARGUMENTS)


async def test_the_same_call_has_the_same_key_in_another_registry_and_another_process() -> None:
    call = make_call("charge", "call_1", ARGUMENTS)
    here = await key_of(call)
    assert await key_of(call) == here
    program = (
        "import asyncio, json, sys\n"
        "import toolrail as tr\n"
        "async def body(arguments, ctx):\n"
        "    return ctx.idempotency_key\n"
        "registry = tr.ToolRegistry()\n"
        "registry.register(tr.Tool(name='charge', description='Charge.',\n"
        "                          parameters={'type': 'object'}, execute=body))\n"
        "call = tr.ToolCall(call_id='call_1', name='charge',\n"
        "                   arguments=json.loads(sys.argv[1]))\n"
        "print(asyncio.run(registry.execute(call)).value)\n"
    )
    reordered = json.dumps(dict(reversed(list(ARGUMENTS.items()))))  # the same, reordered
    for seed in ("1", "2"):  # and other hash seeds
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            program,
            reordered,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        assert (process.returncode, out.decode().strip()) == (0, here)


@pytest.mark.parametrize(
    ("call_id", "name", "arguments"),
    [
        ("call_1", "charge", {**ARGUMENTS, "amount": 1251}),
        ("call_2", "charge", ARGUMENTS),
        ("call_1", "refund", ARGUMENTS),
    ],
)
async def test_the_key_differs_when_the_arguments_the_call_id_or_the_tool_differ(
    call_id: str, name: str, arguments: Any
) -> None:
    registry = tr.ToolRegistry()
    registry.register(make_tool("charge", key_body))
    registry.register(make_tool("refund", key_body))
    first = await registry.execute(make_call("charge", "call_1", ARGUMENTS))
    other = await registry.execute(make_call(name, call_id, arguments))
    assert other.value == documented(call_id, name, arguments)
    assert other.value != first.value


async def test_the_body_middleware_guards_and_observers_see_the_same_key_in_every_retry(
    registry: tr.ToolRegistry,
) -> None:
    seen: list[tuple[str, str, str | None]] = []

    def saw(where: str, execution: tr.Execution) -> None:
        seen.append((where, execution.idempotency_key, execution.durable_id))

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        saw("body", ctx)
        return "ok"

    async def pre(execution: tr.Execution, call_next: PreNext) -> tr.PreDecision:
        saw("pre", execution)
        return await call_next()

    def guard(execution: tr.Execution) -> None:
        saw("guard", execution)

    async def retry(execution: tr.Execution, call_next: AroundNext) -> tr.ToolResult:
        saw("around", execution)
        await call_next()
        return await call_next()  # a retry runs the body again

    async def post(
        execution: tr.Execution, result: tr.ToolResult, call_next: PostNext
    ) -> tr.PostDecision:
        saw("post", execution)
        return await call_next()

    registry.register(make_tool("charge", body))
    registry.pre_execute(pre)
    registry.guard(guard)
    registry.around_execute(retry)
    registry.post_execute(post)
    registry.on_result(lambda execution, result: saw("observer", execution))
    await registry.execute(make_call("charge", "call_1", ARGUMENTS))
    key = documented("call_1", "charge", ARGUMENTS)
    assert seen == [
        (where, key, None)
        for where in ("pre", "guard", "around", "body", "body", "post", "observer")
    ]


async def test_a_call_whose_arguments_failed_the_snapshot_has_a_key_of_its_id_and_name(
    registry: tr.ToolRegistry,
) -> None:
    keys: list[str] = []
    registry.register(make_tool("charge", key_body))
    registry.on_result(lambda execution, result: keys.append(execution.idempotency_key))
    result = await registry.execute(make_call("charge", "call_1", {"x": object()}))
    assert result.error is not None
    assert keys == [documented("call_1", "charge")]


async def durable_keys(tmp_path: Path) -> list[tuple[str, str | None, str]]:
    """What the body and an observer of one call of a DBOS step named ``s`` (on an
    engine named ``keys``) see: where, its ``durable_id``, its ``idempotency_key``."""
    durable = pytest.importorskip("toolrail.durable", reason="needs toolrail[dbos]")
    seen: list[tuple[str, str | None, str]] = []

    async def body(arguments: tr.JsonValue, ctx: tr.RunContext) -> str:
        seen.append(("body", ctx.durable_id, ctx.idempotency_key))
        return "ok"

    registry = tr.ToolRegistry()
    registry.register(make_tool("charge", body))
    registry.on_result(
        lambda execution, result: seen.append(
            ("observer", execution.durable_id, execution.idempotency_key)
        )
    )
    async with durable.DBOS(
        registry, name="keys", database=f"sqlite:///{tmp_path / 'keys.sqlite'}"
    ) as engine:
        await engine.run("s", [make_call("charge", "call_1", ARGUMENTS)])
    return seen


async def test_a_durable_calls_body_sees_the_durable_id_and_key_its_observers_see(
    tmp_path: Path,
) -> None:
    (where, durable_id, key), observed = await durable_keys(tmp_path)
    assert (where, durable_id) == ("body", "s/0")
    assert observed == ("observer", "s/0", key)


async def test_under_an_engine_the_key_is_the_calls_ticket(tmp_path: Path) -> None:
    (_, _, key), (_, _, observed) = await durable_keys(tmp_path)
    assert key == observed == "keys:s/0"


async def test_arguments_past_json_dumps_limits_have_a_key_too() -> None:
    """An int longer than ``sys.get_int_max_str_digits()`` and nesting past the recursion
    limit are lossless JSON: the key is the documented form, written without them."""
    big = 10**5000
    key = await key_of(tr.ToolCall(call_id="c", name="charge", arguments={"n": big, "a": 1}))
    digits = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert key == documented("c", "charge", {"a": 1, "n": big})
    finally:
        sys.set_int_max_str_digits(digits)
    deep: Any = 0
    for _ in range(3000):
        deep = [deep]
    deep_key = await key_of(tr.ToolCall(call_id="c", name="charge", arguments={"d": deep}))
    text = '["c","charge",{"d":' + "[" * 3000 + "0" + "]" * 3000 + "}]"
    assert deep_key == hashlib.sha256(text.encode()).hexdigest()


def test_a_calls_digest_takes_ints_of_any_length() -> None:
    parameters = tr.snapshot_json({"type": "object"})
    assert isinstance(parameters, tr.FrozenDict)
    schema = tr.ToolSchema("add", "Add.", parameters)
    assert tr.call_digest(schema, {"n": 10**5000}) != tr.call_digest(schema, {"n": 10**5000 + 1})
