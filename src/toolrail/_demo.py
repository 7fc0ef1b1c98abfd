"""``toolrail demo``: a scripted model drives real tools through a real registry.

No network and no API key: the "model" replays OpenAI-format assistant messages. Each
step's tool calls go through ``registry.run`` — parallel reads, a write behind an
approval, a guard denial, a timeout, and a batch the user stops — while a live
timeline shows which calls overlapped and when each result was committed.

``toolrail demo --code`` does the same workspace task in code mode (code-mode.md): one
``run_code`` step whose program gathers the reads, writes behind the same approval,
meets the same guard, and whose nested calls fill the timeline.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dispatch.execution import Execution
from ._model.cancel import CancelController
from ._model.decisions import ApprovalOutcome, ApprovalRequest, Ask
from ._model.errors import DENIED
from ._model.lossless import thaw
from ._model.results import ToolResult
from ._registry.registry import ToolRegistry

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

__all__ = ["run_demo"]

BAR_WIDTH = 36


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# What the scripted model answers, step by step, in OpenAI Chat Completions format.
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("Read the workspace (parallel-safe reads overlap)", {
        "role": "assistant", "content": None, "tool_calls": [
            _call("call_1", "list_files", "{}"),
            _call("call_2", "read_file", '{"path": "notes.md"}'),
            _call("call_3", "read_file", '{"path": "todo.md"}'),
        ]}),
    ("Write a summary (an exclusive write behind an approval)", {
        "role": "assistant", "content": None, "tool_calls": [
            _call("call_4", "write_file", '{"path": "summary.md", "text": "3 notes, 2 todos"}'),
            _call("call_5", "word_count", '{"path": "summary.md"}'),
            _call("call_6", "word_count", '{"path": "notes.md"}'),
        ]}),
    ("Reach outside (a guard denies; a hung fetch times out)", {
        "role": "assistant", "content": None, "tool_calls": [
            _call("call_7", "read_file", '{"path": "../../etc/passwd"}'),
            _call("call_8", "fetch", '{"url": "https://example.invalid/slow"}'),
            _call("call_9", "read_file", '{"path": "todo.md"'),
        ]}),
    ("Count everything, two at a time (the user presses stop mid-batch)", {
        "role": "assistant", "content": None, "tool_calls": [
            _call("call_10", "word_count", '{"path": "todo.md"}'),
            _call("call_11", "slow_count", '{"path": "notes.md"}'),
            _call("call_12", "word_count", '{"path": "summary.md"}'),
        ]}),
    ("Done", {"role": "assistant", "content": "The workspace is summarized in summary.md.",
              "tool_calls": None}),
]

# The same task as one program: what a code-mode model answers in a single step.
PROGRAM = """\
import asyncio
files, notes, todo = await asyncio.gather(
    tools.list_files({}),
    tools.read_file({"path": "notes.md"}),
    tools.read_file({"path": "todo.md"}),
)
summary = f"{len(notes.splitlines())} notes, {len(todo.splitlines())} todos"
await tools.write_file({"path": "summary.md", "text": summary})
counts = await asyncio.gather(
    tools.word_count({"path": "summary.md"}),
    tools.word_count({"path": "notes.md"}),
    tools.word_count({"path": "todo.md"}),
)
try:
    await tools.read_file({"path": "../../etc/passwd"})
except ToolCallError as error:
    print("refused:", error)
{"files": files, "summary": summary, "words": counts}
"""

CODE_SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("One program does the task (its nested calls overlap where safe)", {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "run_code", "arguments": json.dumps({"code": PROGRAM})}},
        ]}),
    SCRIPT[-1],
]


@dataclass
class _Row:
    call_id: str
    name: str
    started: float | None = None
    settled: float | None = None
    committed: float | None = None
    outcome: str = ""
    brief: str = ""


@dataclass
class _Step:
    title: str
    began: float
    rows: list[_Row] = field(default_factory=list)
    ended: float | None = None

    def row(self, call_id: str) -> _Row | None:
        return next((r for r in self.rows if r.call_id == call_id), None)


def run_demo(*, auto_approve: bool, code: bool = False) -> int:
    """Run the demo (``code``: in code mode, as one ``run_code`` step); the exit code."""
    try:
        import rich  # noqa: F401
    except ImportError:
        print("toolrail demo needs the cli extra: pip install 'toolrail[cli]'", file=sys.stderr)
        return 2
    if code and importlib.util.find_spec("pydantic_monty") is None:
        print("toolrail demo --code needs the code extra: pip install 'toolrail[code]'",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="toolrail-demo-") as workspace:
        return asyncio.run(_Demo(Path(workspace), auto_approve, code).run())


class _Demo:
    def __init__(self, root: Path, auto_approve: bool, code: bool = False) -> None:
        from rich.console import Console

        self.root = root
        self.code = code
        self.auto_approve = auto_approve
        interactive = sys.stdout.isatty()
        self.console: Console = Console(highlight=False, width=None if interactive else 110)
        self.steps: list[_Step] = []
        self.live: Live | None = None
        self.stop_after_first: CancelController | None = None
        self.registry = self._registry()

    # ---- the tools and the policy ---------------------------------------------------

    def _registry(self) -> ToolRegistry:
        root = self.root
        (root / "notes.md").write_text("toolrail runs tool calls in model order\n"
                                       "parallel where safe\nexclusive where not\n")
        (root / "todo.md").write_text("write the summary\ncheck the timeline\n")
        registry = ToolRegistry(approver=self._approve,
                                presentation="code" if self.code else "native")

        def inside(path: str) -> Path:
            target = (root / path).resolve()
            if root.resolve() not in target.parents:
                raise ValueError(f"{path} is outside the workspace")
            return target

        @registry.tool(concurrency_safe=True)
        async def list_files() -> list[str]:
            """List the files of the workspace."""
            await asyncio.sleep(0.15)  # stands for I/O
            return sorted(p.name for p in root.iterdir())

        @registry.tool(concurrency_safe=True)
        async def read_file(path: str) -> str:
            """Read a text file of the workspace."""
            await asyncio.sleep(0.25)
            return inside(path).read_text()

        @registry.tool(concurrency_safe=True)
        async def word_count(path: str) -> int:
            """Count the words of a file."""
            await asyncio.sleep(0.2)
            return len(inside(path).read_text().split())

        @registry.tool(concurrency_safe=True)
        async def slow_count(path: str) -> int:
            """Count the words of a big file (slowly)."""
            await asyncio.sleep(2)
            return len(inside(path).read_text().split())

        @registry.tool
        async def write_file(path: str, text: str) -> str:
            """Write a text file in the workspace (runs alone: it changes what others read)."""
            await asyncio.sleep(0.1)
            inside(path).write_text(text)
            return f"wrote {len(text)} characters to {path}"

        @registry.tool(timeout=0.3)
        async def fetch(url: str) -> str:
            """Fetch a URL (this one hangs; its 0.3 s timeout ends it)."""
            await asyncio.sleep(30)
            return "never"

        def writes_ask(execution: Execution, call_next: Any) -> Any:
            return Ask("writes change the workspace") if execution.name == "write_file" \
                else call_next()

        def stays_inside(execution: Execution) -> str | None:
            arguments = execution.arguments
            path = arguments.get("path") if isinstance(arguments, dict) else None
            if isinstance(path, str) and ".." in Path(path).parts:
                return f"{path} is outside the workspace"
            return None

        registry.pre_execute(writes_ask)
        registry.guard(stays_inside)
        registry.around_execute(self._time_dispatch)
        registry.on_result(self._committed)
        return registry

    async def _approve(self, request: ApprovalRequest) -> ApprovalOutcome:
        question = f"approve {request.tool_name} {thaw(request.arguments)}? [y/N] "
        if self.auto_approve:
            self._note(f"[yellow]?[/] {question}y [dim](auto-approved)[/]")
            return ApprovalOutcome.ALLOWED_ONCE
        live = self.live
        if live is not None:
            live.stop()
        answer = await asyncio.to_thread(self.console.input, f"[yellow]?[/] {question}")
        if live is not None:
            live.start()
        approved = answer.strip().lower() in ("y", "yes")
        return ApprovalOutcome.ALLOWED_ONCE if approved else ApprovalOutcome.REJECTED

    # ---- the timeline ---------------------------------------------------------------

    async def _time_dispatch(self, execution: Execution, call_next: Any) -> ToolResult:
        row = self._row(execution)
        if row is not None:
            row.started = time.perf_counter()
        try:
            result: ToolResult = await call_next()
        finally:
            if row is not None:
                row.settled = time.perf_counter()
            self._refresh()
        return result

    def _committed(self, execution: Execution, result: ToolResult) -> None:
        row = self._row(execution)
        if row is not None:
            row.committed = time.perf_counter()
            row.outcome = result.error.code or "error" if result.error else "ok"
            row.brief = _brief(result)
        controller = self.stop_after_first
        if controller is not None:
            self.stop_after_first = None
            self._note("[red]■[/] the user pressed stop")
            controller.cancel("the user pressed stop")
        self._refresh()

    def _row(self, execution: Execution) -> _Row | None:
        """The timeline row of a call; a nested call (from run_code) gets one when it starts."""
        step = self.steps[-1]
        row = step.row(execution.call_id)
        if row is None and execution.parent is not None:
            row = _Row(execution.call_id, execution.name)
            step.rows.append(row)
        return row

    def _note(self, text: str) -> None:
        if self.live is not None:
            self.live.console.print(text)
        else:
            self.console.print(text)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._timeline(self.steps[-1]))

    def _timeline(self, step: _Step) -> RenderableType:
        from rich.table import Table

        now = time.perf_counter()
        end = step.ended or now
        span = max(end - step.began, 0.5)
        table = Table(title=step.title, title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("call")
        table.add_column("tool")
        table.add_column(f"dispatch ━  commit ●   (0 … {span:.2f} s)", no_wrap=True)
        table.add_column("result")
        for row in step.rows:
            cells = [" "] * BAR_WIDTH

            def at(moment: float) -> int:
                return min(BAR_WIDTH - 1, int((moment - step.began) / span * BAR_WIDTH))

            if row.started is not None:
                for i in range(at(row.started), at(row.settled or now) + 1):
                    cells[i] = "━"
            if row.committed is not None:
                cells[at(row.committed)] = "●"
            style = "green" if row.outcome == "ok" else "red" if row.outcome else "dim"
            table.add_row(row.call_id, row.name, "".join(cells),
                          f"[{style}]{row.outcome or '…'}[/]")
        return table

    # ---- the agent loop -------------------------------------------------------------

    async def run(self) -> int:
        from rich.live import Live
        from rich.markup import escape

        from .adapters.openai import calls_from_chat, chat_messages

        console = self.console
        console.print("[bold]toolrail demo[/] — a scripted model drives real tools through "
                      f"one registry{' in code mode' if self.code else ''} "
                      f"(workspace: {self.root})\n")
        began = time.perf_counter()
        transcript: list[Any] = []
        for title, message in CODE_SCRIPT if self.code else SCRIPT:
            calls = calls_from_chat(message)
            if not calls:
                console.print(f"[bold]model:[/] {message['content']}")
                break
            step = _Step(title, time.perf_counter(),
                         [_Row(c.call_id, c.name) for c in calls])
            self.steps.append(step)
            controller = CancelController()
            pool = 4
            if title.startswith("Count everything"):
                self.stop_after_first, pool = controller, 2
            with Live(self._timeline(step), console=console, refresh_per_second=20,
                      transient=False) as live:
                self.live = live
                batch = await self.registry.run(calls, max_parallel=pool,
                                                signal=controller.signal)
                step.ended = time.perf_counter()
                live.update(self._timeline(step))
            self.live = None
            if not console.is_terminal:
                console.print()  # a non-terminal Live leaves its last line open
            transcript += chat_messages(calls, batch.results)
            for row in step.rows:
                if row.call_id not in {call.call_id for call in calls}:
                    console.print(f"  {row.call_id} {row.name} (nested): {row.brief}")
            for call, result in zip(calls, batch.results, strict=True):
                console.print(f"  {call.call_id} {call.name}: {_brief(result)}")
                if call.name == "run_code":  # what the model reads back, whole
                    for line in result.text.splitlines():
                        console.print(f"    [dim]│[/] {escape(line)}")
            if batch.cancelled:
                console.print("  [dim]the batch was cancelled: unstarted calls never ran[/]")
            console.print()
        self._summary(time.perf_counter() - began, len(transcript))
        await self.registry.aclose()
        return 0

    def _summary(self, wall: float, messages: int) -> None:
        from rich.table import Table

        rows = [row for step in self.steps for row in step.rows]
        # run_code's own span holds its nested calls': counting it would count them twice
        busy = sum((r.settled or 0) - (r.started or 0) for r in rows
                   if r.started is not None and r.name != "run_code")
        stepping = sum((s.ended or 0) - s.began for s in self.steps)
        outcomes: dict[str, int] = {}
        for row in rows:
            outcomes[row.outcome] = outcomes.get(row.outcome, 0) + 1
        table = Table(title="summary", title_justify="left", show_header=False,
                      show_edge=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("steps", str(len(self.steps)))
        table.add_row("tool calls", str(len(rows)))
        table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
        table.add_row("denials", str(outcomes.get(DENIED, 0)))
        table.add_row("time in tool bodies", f"{busy:.2f} s")
        table.add_row("time the steps took", f"{stepping:.2f} s")
        table.add_row("parallel speed-up", f"{busy / stepping:.2f}x" if stepping else "-")
        table.add_row("tool messages for the model", str(messages))
        table.add_row("demo wall time", f"{wall:.2f} s")
        self.console.print(table)


def _brief(result: ToolResult) -> str:
    text = result.text.replace("\n", " ⏎ ")
    if len(text) > 72:
        text = text[:69] + "..."
    code = f"[red]{result.error.code or 'error'}[/] " if result.error else "[green]ok[/] "
    return code + text
