"""A notes agent on the OpenAI Agents SDK with toolrail underneath, runnable offline.

Three tools (list, read, write), a guard (no paths outside the notes), an approval
(every write asks). A scripted model stands in for OpenAI: `python examples/notes_agent.py`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from openai.types.responses import ResponseFunctionToolCall as Call
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import toolrail as tr
from toolrail.integrations.openai_agents import function_tools

NOTES: dict[str, str] = {"todo.md": "buy milk", "ideas.md": "a tool layer"}


def ask_the_user(request: tr.ApprovalRequest) -> str:
    answer = input(f"{request.reason}: allow {request.tool_name} {tr.thaw(request.arguments)}? [y/N] ")
    return "allowed-once" if answer.strip().lower() == "y" else "rejected"


def notes_only(execution: tr.Execution) -> str | None:
    path = str(getattr(execution.arguments, "get", lambda _: "")("path"))
    return f"{path} is outside the notes" if "/" in path else None


registry = tr.ToolRegistry(approver=ask_the_user)
registry.guard(notes_only)
registry.pre_execute(lambda e, call_next: tr.Ask("writes change your notes")
                     if e.name == "write_note" else call_next())


@registry.tool(concurrency_safe=True)
def list_notes() -> list[str]:
    """List the notes."""
    return sorted(NOTES)


@registry.tool(concurrency_safe=True)
def read_note(path: str) -> str:
    """Read one note."""
    return NOTES[path]


@registry.tool
def write_note(path: str, text: str) -> str:
    """Replace a note's text."""
    NOTES[path] = text
    return f"wrote {path}"




def call(n: int, name: str, **args: Any) -> Call:
    return Call(type="function_call", call_id=f"c{n}", name=name, arguments=json.dumps(args))


class ScriptedModel(Model):
    """Plays the model: two tool steps, then a summary of what the tools said."""

    def __init__(self) -> None:
        self.steps = [[call(1, "list_notes"), call(2, "read_note", path="todo.md"),
                       call(3, "read_note", path="../etc/passwd")],
                      [call(4, "write_note", path="todo.md", text="buy milk and eggs")]]

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        if self.steps:
            return ModelResponse(output=list(self.steps.pop(0)), usage=Usage(), response_id=None)
        said = [f"{item['call_id']}: {item['output']}" for item in input
                if item.get("type") == "function_call_output"]
        text = ResponseOutputText(type="output_text", text="\n".join(said), annotations=[])
        message = ResponseOutputMessage(id="m", type="message", role="assistant",
                                        status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> str:
    agent: Agent[None] = Agent(name="notes", model=ScriptedModel(),
                               tools=list(function_tools(registry)))
    result = await Runner.run(agent, "tidy my notes",
                              run_config=RunConfig(tracing_disabled=True))
    return str(result.final_output)


if __name__ == "__main__":
    print(asyncio.run(main()))
