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
  what the body returned comes back: its value, content and meta, read as the pipeline
  reads a return (pipeline.md "Body").
- **The result is the one in process.** A return that is not lossless JSON comes back
  as the exception the pipeline's output check raises for it (``INVALID_TOOL_OUTPUT``,
  with the same message), and the driver's pipeline renders the value and checks the
  output schema itself. An exception the body raises comes back pickled, as itself: its
  message, type and code. One that does not come back equal (by those three) is a
  ``ToolError`` with its message and code.
- **A fired body signal** (the caller's, a timeout, a cancelled task) cancels the Ray
  task (``ray.cancel(force=True)``). The body returns only once Ray reports that task
  ended, so nothing keeps running after the call.
- **Ray's own failures** are error results that carry none of Ray's text (tracebacks,
  pids, addresses): a task stopped on the worker by anyone else is ``REMOTE_CANCELLED``;
  a worker, node or raylet that died mid-call is ``REMOTE_WORKER_DIED``; anything else
  Ray raises is ``REMOTE_FAILED``.
- **A dead raylet.** A worker kills itself the moment its raylet dies (Linux), so its
  call ends at once and no body keeps running; nothing of a call goes through Ray's
  object store, whose loss would end the agent's process.
- **The run context.** The body gets a ``RemoteContext``: the call's ``call_id``,
  ``name``, ``arguments``, ``scope``, ``durable_id`` and ``idempotency_key``, and a
  signal that never fires (Ray's cancellation stops the body instead).
  ``defer_context``, ``conclude_turn`` and ``report_progress`` have no effect across
  the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import pickle
import select
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._dispatch.execution import RunContext
from ._dispatch.failures import Invalid, from_exception
from ._dispatch.materialize import checked_value, frozen_blocks, output_error, rendered
from ._model.cancel import CancelSignal
from ._model.errors import ToolError, ToolOutputError
from ._model.foreign import is_awaitable, message_of
from ._model.lossless import FrozenDict, json_text, snapshot_json, type_name
from ._model.results import (
    Content,
    ErrorInfo,
    ImageContent,
    TextContent,
    ToolOutput,
    is_content,
    only_content,
)
from ._model.tool import Tool

__all__ = ["REMOTE_CANCELLED", "REMOTE_FAILED", "REMOTE_WORKER_DIED", "Ray", "RemoteContext"]

REMOTE_CANCELLED: Final = "REMOTE_CANCELLED"
REMOTE_WORKER_DIED: Final = "REMOTE_WORKER_DIED"
REMOTE_FAILED: Final = "REMOTE_FAILED"

# What the Ray task returns: JSON text, and the body's exception pickled (or ``None``).
Outcome = tuple[str, bytes | None]

# Ray sends an argument of at most 100 KiB inside the task (max_direct_call_object_size),
# up to 10 MiB in all (task_rpc_inlined_bytes_limit).
_PIECE: Final = 64 * 1024


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

    def tool(self, tool: Tool) -> Tool:
        """``tool``, its body run on Ray: register it as usual."""
        if not isinstance(tool, Tool):
            raise TypeError(f"Ray.tool takes a Tool, got {type(tool).__name__}")
        ray = self._ray
        try:  # Ray would pickle it at the first call: fail here instead
            ray.cloudpickle.dumps(tool.execute)
        except Exception as exc:
            raise TypeError(f'tool "{tool.name}": Ray cannot pickle its body: {exc}') from exc
        # The body travels inside the task's function, which Ray exports once through its
        # control store and a worker loads once. Nothing goes through the object store: a
        # driver that reads it after its raylet died is ended by Ray.
        task = ray.remote(_task(tool.execute)).options(**self._options)

        async def execute(arguments: Any, ctx: RunContext) -> Any:
            call = json_text(FrozenDict(call_id=ctx.call_id, name=ctx.name,
                                        arguments=arguments, scope=_plain(ctx.scope),
                                        durable_id=ctx.durable_id,
                                        idempotency_key=ctx.idempotency_key))
            try:
                ref = task.remote(*_pieces(call))
            except Exception as exc:
                raise _ray_failure(exc) from None
            try:
                outcome = await _outcome(ray, ref)
            except asyncio.CancelledError:
                # The body signal fired (or this task was cancelled): stop the Ray task,
                # and return only once Ray says it has ended.
                ray.cancel(ref, force=True)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(_ended(ref))
                raise
            return _returned(outcome)

        return dataclasses.replace(tool, execute=execute, inline=False,
                                   cancellation="interrupt")


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteContext:
    """What a body run on Ray receives in place of its ``RunContext``."""

    call_id: str
    name: str
    arguments: Any
    scope: Any
    durable_id: str | None = None  # as the driver's ``RunContext`` has them
    idempotency_key: str = ""
    signal: CancelSignal = dataclasses.field(default_factory=CancelSignal.never)

    def defer_context(self, *args: Any, **kwargs: Any) -> None:
        """No effect: the run context's effects do not cross the wire."""

    def conclude_turn(self) -> None:
        """No effect: the run context's effects do not cross the wire."""

    def report_progress(self, *args: Any, **kwargs: Any) -> None:
        """No effect: the run context's effects do not cross the wire."""


# ---- on the worker --------------------------------------------------------------------


def _task(body: Any) -> Callable[..., Outcome]:
    """The Ray task of ``body``: run it on a call; what it returned, or how it failed."""

    def run_body(*pieces: bytes) -> Outcome:
        _die_with_raylet()
        try:
            data = _loads(b"".join(pieces).decode())
            arguments = snapshot_json(data["arguments"])
            ctx = RemoteContext(data["call_id"], data["name"], arguments, data["scope"],
                                data["durable_id"], data["idempotency_key"])
            out = body(arguments, ctx)
            if is_awaitable(out):
                out = asyncio.run(_awaited(out))
            return _read(data["name"], out), None
        except (Exception, asyncio.CancelledError) as exc:
            return _failure(exc)

    return run_body


async def _awaited(out: Any) -> Any:
    return await out


def _read(name: str, out: Any) -> str:
    """What the body returned, read as the pipeline reads it (``body_result``), as JSON.

    A return the pipeline would reject raises the exception it would raise for it.
    """
    content: Any = None
    meta: Any = None
    try:
        if out is None:
            value: Any = None
            content = ()
        elif issubclass(type(out), ToolOutput):
            value, content, meta = out.value, out.content, out.meta
        elif is_content(out):
            value, content = None, (out,)
        elif only_content(out):
            value, content = None, out
        else:
            value = out
        value = checked_value(name, None, value)  # the schema is checked by the driver
    except ToolOutputError:
        raise
    except Exception as exc:
        raise output_error(name, message_of(exc)) from exc
    try:
        blocks = None if content is None else [_block(b) for b in frozen_blocks(content)]
        meta = snapshot_json(meta)
    except Exception:
        if content is None:
            rendered(name, value)  # the pipeline reports a value it cannot render first
        raise Invalid("tool result must be losslessly JSON-serializable") from None
    # The driver renders a value without content itself, as the pipeline does.
    return json_text(FrozenDict(value=value, content=blocks, meta=meta))


def _failure(exc: BaseException) -> Outcome:
    """The body's failure: the pipeline's reading of it (message, code, type), and the
    exception itself pickled, or ``None`` when it cannot be."""
    from ray import cloudpickle

    dumps: Callable[[object], bytes] = cloudpickle.dumps
    error = from_exception(exc).error
    assert error is not None
    try:
        pickled: bytes | None = dumps(exc)
    except Exception:
        pickled = None
    return json_text(FrozenDict(error=error.message, code=error.code, type=error.type)), pickled


@functools.cache  # once per worker process
def _die_with_raylet() -> None:
    """Kill this worker the moment its raylet, its parent, dies (on Linux).

    Ray would let the body run to its end, out of reach: the driver's ``ray.cancel``
    needs the raylet. Killed, the worker ends its call at once, as a dead worker.
    """
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/comm") as comm:
            if comm.read().strip() != "raylet":
                return
        fd = os.pidfd_open(parent)
    except (OSError, AttributeError):  # not Linux, or no pidfd: Ray's own shutdown applies
        return
    if os.getppid() != parent:  # it died before the pidfd was opened
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=_kill_on_exit, args=(fd,), name="toolrail-raylet-watch",
                     daemon=True).start()


def _kill_on_exit(pidfd: int) -> None:
    select.select([pidfd], [], [])  # readable once that process has exited
    os.kill(os.getpid(), signal.SIGKILL)


# ---- on the driver --------------------------------------------------------------------


async def _outcome(ray: Any, ref: Any) -> Outcome:
    """The task's outcome; a failure of Ray's own as a ``ToolError`` without Ray's text."""
    exceptions = ray.exceptions
    try:
        out: Outcome = await ref
    except exceptions.TaskCancelledError:
        raise ToolError("the Ray task running the tool was cancelled",
                        code=REMOTE_CANCELLED) from None
    except (exceptions.WorkerCrashedError, exceptions.NodeDiedError,
            exceptions.ActorDiedError, exceptions.LocalRayletDiedError,
            exceptions.OutOfMemoryError) as exc:
        raise ToolError(f"the Ray worker running the tool died: {type_name(type(exc))}",
                        code=REMOTE_WORKER_DIED) from None
    except exceptions.RayTaskError as exc:  # outside the body: the function did not load
        raise _ray_failure(exc.cause) from None
    except exceptions.RayError as exc:
        raise _ray_failure(exc) from None
    return out


def _ray_failure(exc: BaseException) -> ToolError:
    # By its type alone: Ray's messages hold tracebacks, paths, pids and addresses.
    return ToolError(f"the Ray task running the tool failed: {type_name(type(exc))}",
                     code=REMOTE_FAILED)


async def _ended(ref: Any) -> None:
    await ref


def _returned(outcome: Outcome) -> ToolOutput:
    """The body's return for the driver's pipeline to check; its failure raised."""
    text, pickled = outcome
    data = _loads(text)
    if "error" in data:
        raise _raised(ErrorInfo(data["error"], data["code"], data["type"]), pickled)
    content = data["content"]
    return ToolOutput(value=data["value"], meta=data["meta"],
                      content=None if content is None else [_content(b) for b in content])


def _raised(error: ErrorInfo, pickled: bytes | None) -> BaseException:
    """The body's exception, if it came back whole (the same result); else a stand-in."""
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
        except Exception:
            exc = None
        if isinstance(exc, BaseException) and from_exception(exc).error == error:
            return exc
    stand_in = ToolError(error.message)
    stand_in.code = error.code  # type: ignore[assignment]  # None: it was not a ToolError
    return stand_in


# ---- the wire -------------------------------------------------------------------------


def _pieces(call: str) -> list[bytes]:
    """The call's text in pieces small enough that Ray sends them inside the task.

    Ray puts a larger argument in the object store, and a driver that writes there after
    its raylet died is ended by Ray.
    """
    data = call.encode()
    return [data[i:i + _PIECE] for i in range(0, len(data), _PIECE)] or [b""]


def _block(block: Content) -> dict[str, str]:
    if type(block) is TextContent:
        return {"type": "text", "text": block.text}
    assert type(block) is ImageContent
    return {"type": "image", "data": block.data, "mime_type": block.mime_type}


def _content(data: Mapping[str, str]) -> Content:
    if data["type"] == "text":
        return TextContent(data["text"])
    return ImageContent(data["data"], data["mime_type"])


def _loads(text: str) -> Any:
    """``json.loads``, with ints longer than the interpreter's digit limit too."""
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text, parse_int=_int)


def _int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:  # past the digit limit: two halves, each under it eventually
        half = len(digits) // 2
        high, low = digits[:-half], digits[-half:]
        scale: int = 10**half
        return _int(high) * scale + (-1 if high.startswith("-") else 1) * _int(low)


def _plain(scope: Any) -> Any:
    """A scope as JSON: a ``str`` or ``None`` as it is, anything else by its ``str``."""
    return scope if scope is None or isinstance(scope, str) else str(scope)
