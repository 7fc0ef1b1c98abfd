"""Tool bodies on a Ray cluster: ``remote.Ray().tool(tool)`` (docs/scale-out.md).

The executor works at the body stage. It returns the same tool with a body that submits
the original body as a Ray task and awaits it, so everything around the body is the
pipeline's own:
- the tool's ``timeout``, its body signal, and the wait for the body;
- the exact outcome codes (``TOOL_TIMEOUT``, ``ABORTED``, ``INVALID_ARGS``, ...);
- the output check.

It is not an around-execute middleware that skips ``call_next``: that would lose all of
these.

- **Across the wire** the call is lossless JSON text: the frozen arguments go out, and
  the body's value (or ``ToolOutput``) comes back, as JSON.
- **A fired body signal** (the caller's, a timeout, a cancelled task) cancels the Ray
  task (``ray.cancel(force=True)``). The body returns only once Ray reports that task
  ended, so nothing keeps running after the call.
- **A task stopped on the worker** by anyone else ends as an error result, with code
  ``REMOTE_CANCELLED``. A worker that died mid-call ends with ``REMOTE_WORKER_DIED``.
  Neither hangs.
- **Exceptions.** A ``ToolError`` the body raises on the worker comes back with its
  code. Any other exception becomes a ``ToolError`` that names its type.
- **The run context.** The body gets a ``RemoteContext``: the call's ``call_id``,
  ``name``, ``arguments`` and ``scope``, and a signal that never fires (Ray's
  cancellation stops the body instead). ``defer_context``, ``conclude_turn`` and
  ``report_progress`` have no effect across the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

from ._dispatch.execution import RunContext
from ._model.cancel import CancelSignal
from ._model.errors import ToolError
from ._model.foreign import is_awaitable
from ._model.lossless import snapshot_json, thaw
from ._model.results import ToolOutput
from ._model.tool import Tool

__all__ = ["REMOTE_CANCELLED", "REMOTE_WORKER_DIED", "Ray", "RemoteContext"]

REMOTE_CANCELLED: Final = "REMOTE_CANCELLED"
REMOTE_WORKER_DIED: Final = "REMOTE_WORKER_DIED"


class Ray:
    """Run tool bodies as Ray tasks on the cluster ``ray.init()`` connected to.

    ``options`` go to each task (``num_cpus``, ``resources``, ``runtime_env``, ...).
    The default ``max_retries=0`` makes a dead worker's call an error result; Ray would
    otherwise run a non-idempotent body a second time.
    """

    def __init__(self, **options: Any) -> None:
        import ray

        self._ray = ray
        self._options = {"max_retries": 0, **options}
        self._task = ray.remote(_run_body)

    def tool(self, tool: Tool) -> Tool:
        """``tool``, its body run on Ray: register it as usual."""
        if not isinstance(tool, Tool):
            raise TypeError(f"Ray.tool takes a Tool, got {type(tool).__name__}")
        ray = self._ray
        # The body goes to the object store once; a worker loads it on its first call and
        # keeps it (the reference travels inside a list, which Ray does not resolve).
        body = [uuid.uuid4().hex, ray.put(tool.execute)]
        task = self._task.options(**self._options)

        async def execute(arguments: Any, ctx: RunContext) -> Any:
            call = json.dumps({"call_id": ctx.call_id, "name": ctx.name,
                               "arguments": thaw(arguments), "scope": _plain(ctx.scope)})
            ref = task.remote(body, call)
            try:
                return _decoded(await _outcome(ray, ref))
            except asyncio.CancelledError:
                # The body signal fired (or this task was cancelled): stop the Ray task,
                # and return only once Ray says it has ended.
                ray.cancel(ref, force=True)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(_ended(ref))
                raise

        return dataclasses.replace(tool, execute=execute, inline=False,
                                   cancellation="interrupt")


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteContext:
    """What a body run on Ray receives in place of its ``RunContext``."""

    call_id: str
    name: str
    arguments: Any
    scope: Any
    signal: CancelSignal = dataclasses.field(default_factory=CancelSignal.never)

    def defer_context(self, *args: Any, **kwargs: Any) -> None:
        """No effect: the run context's effects do not cross the wire."""

    def conclude_turn(self) -> None:
        """No effect: the run context's effects do not cross the wire."""

    def report_progress(self, *args: Any, **kwargs: Any) -> None:
        """No effect: the run context's effects do not cross the wire."""


_BODIES: dict[str, Any] = {}  # in a Ray worker: the bodies it has loaded, by key


def _run_body(where: list[Any], call: str) -> str:
    """The Ray task: run the body on the call's frozen arguments; its outcome as JSON."""
    key, ref = where
    body = _BODIES.get(key)
    if body is None:
        import ray

        body = _BODIES[key] = ray.get(ref)
    data = json.loads(call)
    arguments = snapshot_json(data["arguments"])
    ctx = RemoteContext(data["call_id"], data["name"], arguments, data["scope"])
    try:
        out = body(arguments, ctx)
        if is_awaitable(out):
            out = asyncio.run(_awaited(out))
    except ToolError as exc:
        return json.dumps({"error": exc.message, "code": exc.code, "type": type(exc).__name__})
    except Exception as exc:
        return json.dumps({"error": f"{type(exc).__name__}: {exc}", "code": None,
                           "type": type(exc).__name__})
    if isinstance(out, ToolOutput):
        return json.dumps({"output": {"value": thaw(snapshot_json(out.value)),
                                      "meta": thaw(snapshot_json(out.meta)),
                                      "content": _content(out.content)}})
    return json.dumps({"value": thaw(snapshot_json(out))})


async def _awaited(out: Any) -> Any:
    return await out


async def _outcome(ray: Any, ref: Any) -> str:
    """The task's JSON outcome; a Ray failure that is not the body's as a ``ToolError``."""
    exceptions = ray.exceptions
    try:
        out: str = await ref
    except exceptions.TaskCancelledError as exc:
        raise ToolError(f"the Ray task running the tool was cancelled: {exc}",
                        code=REMOTE_CANCELLED) from None
    except (exceptions.WorkerCrashedError, exceptions.NodeDiedError,
            exceptions.ActorDiedError, exceptions.LocalRayletDiedError) as exc:
        raise ToolError(f"the Ray worker running the tool died: {type(exc).__name__}",
                        code=REMOTE_WORKER_DIED) from None
    return out


async def _ended(ref: Any) -> None:
    await ref


def _decoded(text: str) -> Any:
    data = json.loads(text)
    if "error" in data:
        error = ToolError(data["error"], code=data["code"])
        raise error
    if "output" in data:
        output = data["output"]
        content = output["content"]
        return ToolOutput(value=output["value"], meta=output["meta"],
                          content=None if content is None else _blocks(content))
    return data["value"]


def _content(blocks: Any) -> Any:
    if blocks is None:
        return None
    return [{"type": "text", "text": b.text} if b.type == "text"
            else {"type": "image", "data": b.data, "mime_type": b.mime_type} for b in blocks]


def _blocks(data: list[Mapping[str, Any]]) -> list[Any]:
    from ._model.results import ImageContent, TextContent

    return [TextContent(b["text"]) if b["type"] == "text"
            else ImageContent(b["data"], b["mime_type"]) for b in data]


def _plain(scope: Any) -> Any:
    """A scope as JSON: a ``str`` or ``None`` as it is, anything else by its ``str``."""
    return scope if scope is None or isinstance(scope, str) else str(scope)
