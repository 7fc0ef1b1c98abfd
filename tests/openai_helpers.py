"""Set-up shared by the test_adapters_openai*.py files: images, schemas, SDK response
builders and a real ``openai`` client over an ``httpx2.MockTransport``.

Import as ``from openai_helpers import ...``; helpers shared more widely are in helpers.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast, get_type_hints

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
)
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import (
    Response,
)

import toolrail as tr
from helpers import adder_registry
from toolrail.adapters import openai as oa

PNG = tr.ImageContent(data="iVBORw0KGgo=", mime_type="image/png")


SVG = tr.ImageContent(data="PHN2Zy8+", mime_type="image/svg+xml")


def exactly(message: str) -> str:
    """A ``match=`` pattern that accepts exactly ``message``."""
    return f"^{re.escape(message)}\\Z"


@dataclass
class Point:
    x: int
    y: int = 0


def registry() -> tr.ToolRegistry:
    """``adder_registry()`` plus a ``plot`` tool."""
    reg = adder_registry()

    @reg.tool
    def plot(points: list[Point], label: str | None = None, mode: Literal["x", "y"] = "x") -> str:
        """Plot points."""
        return f"{len(points)} points, {label}, {mode}"

    return reg


def schema(name: str, parameters: dict[str, Any], description: str = "A tool.") -> tr.ToolSchema:
    return tr.ToolSchema(name, description, cast(tr.FrozenDict, tr.snapshot_json(parameters)))


def strict(parameters: dict[str, Any]) -> Any:
    [tool] = oa.chat_tools([schema("t", parameters)], strict=True)
    return tool["function"]["parameters"]


def typed_dict_keys(cls: type) -> set[str]:
    return set(get_type_hints(cls))


def chat_message(*tool_calls: tuple[str, str, str | None]) -> ChatCompletionMessage:
    return ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id=call_id,
                type="function",
                function=Function.model_construct(name=name, arguments=arguments),
            )
            for call_id, name, arguments in tool_calls
        ],
    )


def response(*items: dict[str, Any]) -> Response:
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-test",
            "output": list(items),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


Handler = Callable[[httpx2.Request], httpx2.Response]


def client(handler: Handler) -> openai.OpenAI:
    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="test",
        base_url="https://openai.test/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )
