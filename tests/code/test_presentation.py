"""Presentation modes (code-mode.md, "Presentation"): what a scope's model is offered."""

from __future__ import annotations

import sys
from typing import Any, Literal

import pytest

import toolrail as tr
from helpers import assert_error, exactly, raw_tool
from toolrail.code import CodeSettings

COLLAPSE = ('unknown tool "{0}": only run_code is callable directly; call {0} from inside a '
            "run_code program instead")
RESERVED = ('tool name "run_code" is reserved for the code mode transport and cannot be '
            "registered or shadowed")
RESTRICTED = ('restrict() cannot name the code mode transport "run_code"; restrict the tools '
              "it calls instead")


def registry_with_tools(**options: Any) -> tr.ToolRegistry:
    registry = tr.ToolRegistry(**options)
    registry.register(raw_tool("read", concurrency_safe=True))
    registry.register(raw_tool("write"))
    return registry


def names(schemas: list[tr.ToolSchema]) -> list[str]:
    return [s.name for s in schemas]


def test_the_registry_presents_native_by_default() -> None:
    registry = registry_with_tools()
    assert registry.presentation() == "native"
    assert registry.presentation("agent") == "native"
    assert names(registry.schemas()) == ["read", "write"]
    assert registry.get("run_code") is None


def test_code_mode_offers_exactly_run_code_and_both_offers_it_last() -> None:
    code = registry_with_tools(presentation="code")
    assert names(code.schemas()) == ["run_code"]
    both = registry_with_tools(presentation="both")
    assert names(both.schemas()) == ["read", "write", "run_code"]
    for registry in (code, both):
        transport = registry.get("run_code")
        assert isinstance(transport, tr.Tool)
        assert registry.schemas()[-1] == registry._core.resolve("run_code", None).schema  # type: ignore[union-attr]
        assert registry.get("read") is not None  # other names: as today


def test_the_transport_tool_has_the_spec_parameters_and_is_exclusive() -> None:
    registry = registry_with_tools(presentation="code")
    transport = registry.get("run_code")
    assert transport is not None
    parameters = tr.thaw(tr.snapshot_json(transport.parameters))
    assert parameters["type"] == "object"
    assert list(parameters["properties"]) == ["code"]
    assert parameters["properties"]["code"]["type"] == "string"
    assert parameters["required"] == ["code"]
    assert parameters["additionalProperties"] is False
    assert transport.concurrency_safe is False
    assert registry.execution_mode(tr.ToolCall(call_id="1", name="run_code")) is (
        tr.ExecutionMode.EXCLUSIVE)
    assert "async def read(self, args: ReadArgs) -> ReadOutput:" in transport.description
    assert "async def write(self, args: WriteArgs) -> WriteOutput:" in transport.description
    assert "run_code" not in transport.description.split("class Tools(Protocol):")[1]


def test_the_transport_is_rebuilt_only_when_the_scopes_tools_change() -> None:
    registry = registry_with_tools(presentation="code")
    first = registry.get("run_code")
    assert registry.get("run_code") is first
    registry.guard(lambda e: None)  # not a change of the tool set
    assert registry.get("run_code") is first
    dispose = registry.register(raw_tool("list"))
    second = registry.get("run_code")
    assert second is not first
    assert second is not None
    assert "async def list(" in second.description
    dispose()
    third = registry.get("run_code")
    assert third is not None
    assert first is not None
    assert third.description == first.description  # byte-identical for the same tool set


def test_a_scope_sees_its_own_tools_and_restrictions_in_the_sdk() -> None:
    registry = registry_with_tools()
    with registry.scope("agent") as scope:
        scope.present_as("code")
        scope.register(raw_tool("mine"))
        scope.restrict(deny=["write"])
        transport = scope.get("run_code")
        assert transport is not None
        assert "async def mine(" in transport.description
        assert "async def read(" in transport.description
        assert "async def write(" not in transport.description
        assert names(scope.schemas()) == ["run_code"]
    assert registry.get("run_code") is None  # the global view stays native


def test_present_as_sets_a_scopes_mode_and_its_disposer_lifts_it() -> None:
    registry = registry_with_tools()
    scope = registry.scope("agent")
    dispose = scope.present_as("both")
    assert registry.presentation("agent") == "both"
    assert registry.presentation() == "native"
    assert names(scope.schemas()) == ["read", "write", "run_code"]
    dispose()
    assert registry.presentation("agent") == "native"
    assert scope.get("run_code") is None


def test_several_handles_may_declare_the_same_mode_and_each_lifts_its_own() -> None:
    registry = registry_with_tools()
    one, two = registry.scope("agent"), registry.scope("agent")
    first = one.present_as("code")
    second = two.present_as("code")
    first()
    assert registry.presentation("agent") == "code"
    second()
    assert registry.presentation("agent") == "native"


def test_declaring_a_different_mode_while_one_is_active_raises() -> None:
    registry = registry_with_tools()
    registry.scope("agent").present_as("code")
    with pytest.raises(ValueError, match=exactly(
            'present_as("both") conflicts with "code" already declared for this scope; '
            "one scope presents its tools one way")):
        registry.scope("agent").present_as("both")
    assert registry.presentation("agent") == "code"


def test_a_scope_may_present_natively_in_a_code_registry() -> None:
    registry = registry_with_tools(presentation="code")
    scope = registry.scope("agent")
    scope.present_as("native")
    assert names(scope.schemas()) == ["read", "write"]
    assert scope.get("run_code") is None


@pytest.mark.parametrize("bad", ["Code", "", None, 1, "python"])
def test_an_unknown_mode_raises(bad: Any) -> None:
    message = f'presentation must be "native", "code" or "both", got {bad!r}'
    with pytest.raises(ValueError, match=exactly(message)):
        tr.ToolRegistry(presentation=bad)
    with pytest.raises(ValueError, match=exactly(message)):
        tr.ToolRegistry().scope("agent").present_as(bad)


def test_code_mode_without_the_extra_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_monty", None)
    message = "code mode needs the \"code\" extra: pip install 'toolrail[code]'"
    modes: tuple[Literal["code", "both"], ...] = ("code", "both")
    for mode in modes:
        with pytest.raises(ImportError, match=exactly(message)):
            tr.ToolRegistry(presentation=mode)
        with pytest.raises(ImportError, match=exactly(message)):
            tr.ToolRegistry().scope("agent").present_as(mode)
    tr.ToolRegistry().scope("agent").present_as("native")  # needs nothing


def test_present_as_notifies_listeners_and_a_raising_listener_rolls_it_back() -> None:
    registry = registry_with_tools()
    seen: list[str] = []
    registry.on_change(lambda: seen.append(registry.presentation("agent")))
    dispose = registry.scope("agent").present_as("code")
    assert seen == ["code"]
    dispose()
    assert seen == ["code", "native"]

    def refuse() -> None:
        raise RuntimeError("no")

    registry.on_change(refuse)
    with pytest.raises(RuntimeError, match="no"):
        registry.scope("agent").present_as("code")
    assert registry.presentation("agent") == "native"


def test_run_code_is_reserved_in_every_mode() -> None:
    modes: tuple[Literal["native", "code", "both"], ...] = ("native", "code", "both")
    for mode in modes:
        registry = tr.ToolRegistry(presentation=mode)
        with pytest.raises(ValueError, match=exactly(RESERVED)):
            registry.register(raw_tool("run_code"))
        with pytest.raises(ValueError, match=exactly(RESERVED)):
            registry.scope("agent").register(raw_tool("run_code"))
    with pytest.raises(TypeError, match="register\\(\\) takes a Tool"):
        tr.ToolRegistry().register("run_code")  # type: ignore[arg-type]


def test_the_reserved_name_is_checked_before_the_other_tool_checks() -> None:
    with pytest.raises(ValueError, match=exactly(RESERVED)):
        tr.ToolRegistry().register(raw_tool("run_code", parameters={"type": "array"}))


def test_restrict_cannot_name_run_code_after_the_empty_filter_check() -> None:
    registry = registry_with_tools(presentation="code")
    scope = registry.scope("agent")
    with pytest.raises(ValueError, match="neither allow nor deny"):
        scope.restrict()
    with pytest.raises(ValueError, match=exactly(RESTRICTED)):
        scope.restrict(allow=["read", "run_code"])
    with pytest.raises(ValueError, match=exactly(RESTRICTED)):
        scope.restrict(deny=["run_code", "unknown"])  # before the unknown-name check
    scope.restrict(allow=["read"])
    assert names(scope.schemas()) == ["run_code"]
    assert scope.get("run_code") is not None  # never masked


async def test_a_model_direct_call_of_a_native_tool_is_refused_in_code_mode() -> None:
    registry = registry_with_tools(presentation="code")
    seen: list[str] = []
    def pre(execution: tr.Execution, call_next: Any) -> Any:
        seen.append("pre")
        return call_next()

    def guard(execution: tr.Execution) -> None:
        seen.append("guard")

    registry.pre_execute(pre)
    registry.guard(guard)
    observed: list[tr.ToolResult] = []
    registry.on_result(lambda e, r: observed.append(r))
    result = await registry.execute(tr.ToolCall(call_id="1", name="read"))
    assert_error(result, COLLAPSE.format("read"), "UNKNOWN_TOOL", "ToolNotFoundError")
    assert seen == []
    assert observed == [result]
    missing = await registry.execute(tr.ToolCall(call_id="2", name="nope"))
    assert_error(missing, COLLAPSE.format("nope"), "UNKNOWN_TOOL", "ToolNotFoundError")
    assert registry.execution_mode(tr.ToolCall(call_id="3", name="read")) is (
        tr.ExecutionMode.EXCLUSIVE)


async def test_a_cancelled_direct_call_still_gets_aborted_before_dispatch() -> None:
    registry = registry_with_tools(presentation="code")
    controller = tr.CancelController()
    controller.cancel()
    result = await registry.execute(
        tr.ToolCall(call_id="1", name="read", signal=controller.signal))
    assert result.error is not None
    assert result.error.code == "ABORTED_BEFORE_DISPATCH"


async def test_nested_calls_and_both_mode_run_native_tools() -> None:
    registry = registry_with_tools(presentation="code")
    parent = registry.get("run_code")
    assert parent is not None
    token = await _a_token(registry)
    nested = await registry.execute(
        tr.ToolCall(call_id="1", name="read", arguments={"x": 1}, parent=token))
    assert nested.value == {"x": 1}
    both = registry_with_tools(presentation="both")
    direct = await both.execute(tr.ToolCall(call_id="1", name="read", arguments={"y": 2}))
    assert direct.value == {"y": 2}


async def _a_token(registry: tr.ToolRegistry) -> tr.ExecutionToken:
    tokens: list[tr.ExecutionToken] = []
    registry.on_result(lambda e, r: tokens.append(e.token))
    await registry.execute(tr.ToolCall(call_id="0", name="nope"))
    return tokens[-1]


def test_code_settings_are_frozen_with_the_spec_defaults_and_checked() -> None:
    settings = CodeSettings()
    assert (settings.max_duration, settings.max_memory, settings.max_output_bytes,
            settings.max_calls, settings.max_parallel, settings.type_check) == (
        30.0, 256 * 1024 * 1024, 1024 * 1024, 200, 10, True)
    with pytest.raises(AttributeError):
        settings.max_calls = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_calls must be a positive integer"):
        CodeSettings(max_calls=0)
    with pytest.raises(ValueError, match="max_duration"):
        CodeSettings(max_duration=float("inf"))
    with pytest.raises(TypeError, match="code settings must be a CodeSettings"):
        tr.ToolRegistry(code={"max_calls": 3})  # type: ignore[arg-type]


def test_a_scopes_declared_settings_come_before_the_registrys() -> None:
    registry = tr.ToolRegistry(code=CodeSettings(max_calls=5))
    assert registry._code_settings(None).max_calls == 5
    registry.scope("agent").present_as("code", settings=CodeSettings(max_calls=7))
    assert registry._code_settings("agent").max_calls == 7
    assert registry._code_settings("other").max_calls == 5
    assert tr.ToolRegistry()._code_settings(None) == CodeSettings()
