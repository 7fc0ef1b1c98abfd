"""The ``toolrail`` command: ``demo``, ``list``, ``call`` and ``serve``.

Exit codes: 0 success; 1 the call ran and its result is an error; 2 a usage error
(bad TARGET, unknown tool or scope, arguments that are not JSON, a missing extra).
``--scope KEY`` must name a scope that has a layer (``ToolRegistry.scopes()``), matched
by ``str(key)``; any other key is a usage error naming the scopes that exist.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import sys
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from ._model.tool import ToolCall, ToolSchema
from ._registry.registry import ToolRegistry

__all__ = ["main"]

TARGET_HELP = ("module.path:attribute or path/to/file.py:attribute naming a ToolRegistry "
               "(or a callable returning one)")
SCOPE_NOTE = "; KEY must name a scope with something registered, restricted or guarded in it"
FORMATS = ("table", "json", "openai", "anthropic", "gemini", "mcp")


class UsageError(Exception):
    """A mistake on the command line: printed as ``toolrail: <message>``, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolrail",
        description="The tool layer for LLM agents: a scoped registry, one execute pipeline, "
                    "a parallel scheduler.",
        epilog=f"TARGET is {TARGET_HELP}. Exit codes: 0 ok, 1 the call's result is an "
               "error, 2 usage error.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="watch a scripted model drive real tools (no network, no API key)",
        description="A scripted model drives several steps of tool calls through a real "
                    "registry on a temporary workspace: parallel reads, a write behind an "
                    "approval, a guard denial, a timeout and a cancelled batch, with a live "
                    "timeline of what ran in parallel and when each result was committed.")
    demo.add_argument("--yes", action="store_true",
                      help="approve every approval request (the default when stdin is not "
                           "a terminal)")
    demo.add_argument("--code", action="store_true",
                      help="do the same task in code mode: one run_code step whose program "
                           "calls the tools (needs the code extra)")
    demo.add_argument("--durable", action="store_true",
                      help="show a durable step on DBOS/SQLite: an agent killed while an "
                           "approval waits, the approval answered from a second process, "
                           "the step resumed (needs the dbos extra)")

    listing = commands.add_parser("list", help="print the tool schemas a scope sees",
                                  description="Print the schemas of the tools a scope sees.")
    listing.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    listing.add_argument("--scope", metavar="KEY",
                         help="the scope to view (default: global)" + SCOPE_NOTE)
    listing.add_argument("--format", choices=FORMATS, default="table",
                         help="table (default), json, or a provider's tool format")

    call = commands.add_parser("call", help="run one call through the full pipeline",
                               description="Run one tool call through the full pipeline "
                                           "and print its result.")
    call.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    call.add_argument("name", metavar="NAME", help="the tool to call")
    call.add_argument("arguments", metavar="JSON", nargs="?", default=None,
                      help='the arguments as a JSON object, e.g. \'{"path": "a.txt"}\'')
    call.add_argument("--scope", metavar="KEY",
                      help="call the tool as this scope sees it" + SCOPE_NOTE)
    call.add_argument("--json", action="store_true", help="print the whole result as JSON")

    serve = commands.add_parser("serve", help="serve the registry's tools over MCP",
                                description="Serve the tools a scope sees as an MCP server "
                                            "(stdio by default).")
    serve.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    serve.add_argument("--scope", metavar="KEY",
                       help="serve the tools this scope sees" + SCOPE_NOTE)
    serve.add_argument("--http", metavar="HOST:PORT",
                       help="serve streamable HTTP on HOST:PORT instead of stdio")
    serve.add_argument("--max-request-bytes", metavar="N", type=_positive_int, default=None,
                       help="with --http: the largest request body accepted, in bytes "
                            "(default 4194304, the SDK's 4 MiB); a larger one is refused "
                            "with HTTP 413 and a JSON-RPC error naming the limit")
    serve.add_argument("--stateless", action="store_true",
                       help="with --http: every request stands alone, so replicas behind a "
                            "load balancer need no session affinity")
    return parser


def _positive_int(text: str) -> int:
    """``--max-request-bytes``'s value: a positive integer (argparse makes it exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer number of bytes")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolrail`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo" and args.durable:
            from ._demo_durable import run_durable_demo

            return run_durable_demo()
        if args.command == "demo":
            from ._demo import run_demo

            return run_demo(auto_approve=args.yes or not sys.stdin.isatty(), code=args.code)
        if args.command is None:
            parser.print_help()
            return 2
        registry = load_target(args.target)
        scope = resolve_scope(registry, args.scope)  # list, call and serve all take --scope
        if args.command == "list":
            return _list(registry, scope, args.format)
        if args.command == "call":
            return _call(registry, args.name, args.arguments, scope, args.json)
        return _serve(registry, scope, args.http, args.max_request_bytes, args.stateless)
    except UsageError as exc:
        print(f"toolrail: {exc}", file=sys.stderr)
        return 2


def load_target(target: str) -> ToolRegistry:
    """The registry ``TARGET`` names; ``UsageError`` saying what is wrong otherwise."""
    where, sep, attribute = target.rpartition(":")
    if not sep or not where or not attribute:
        raise UsageError(f"TARGET {target!r} has no ':attribute'; TARGET is {TARGET_HELP}")
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise UsageError(f"TARGET {target!r}: no such file {where!r}")
            spec = importlib.util.spec_from_file_location(f"_toolrail_target_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise UsageError(f"TARGET {target!r}: cannot import {where!r}")
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.resolve().parent))
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, ".")
            module = importlib.import_module(where)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"TARGET {target!r}: importing {where!r} failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    try:
        value: Any = getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"TARGET {target!r}: {where!r} has no attribute {attribute!r}") from None
    if not isinstance(value, ToolRegistry) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise UsageError(f"TARGET {target!r}: calling {attribute!r} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(value, ToolRegistry):
        raise UsageError(f"TARGET {target!r} is a {type(value).__name__}, not a ToolRegistry; "
                         f"TARGET is {TARGET_HELP}")
    return value


def resolve_scope(registry: ToolRegistry, given: str | None) -> Hashable | None:
    """The key of the scope ``--scope`` names; ``UsageError`` naming the scopes that exist.

    A scope exists while it has a layer (``registry.scopes()``): a key with nothing
    registered, restricted or guarded in it sees exactly the global tools, which for a
    mistyped key would run what the intended scope hides. A key that is not a ``str``
    is named by its ``str()``.
    """
    if given is None:
        return None
    keys = registry.scopes()
    for key in keys:
        if isinstance(key, str) and key == given:
            return key
    named = [key for key in keys if str(key) == given]
    if len(named) == 1:
        return named[0]
    if named:
        raise UsageError(f"scope {given!r} is ambiguous: {len(named)} scope keys read "
                         f"{given!r} ({', '.join(map(repr, named))})")
    known = ", ".join(str(key) for key in keys) or "(none)"
    raise UsageError(f"unknown scope {given!r} (nothing is registered, restricted or guarded "
                     f"in it); scopes: {known}")


def _list(registry: ToolRegistry, scope: Hashable | None, form: str) -> int:
    schemas = registry.schemas(scope)
    if form == "table":
        width = max((len(s.name) for s in schemas), default=4)
        for schema in schemas:
            tool = registry.get(schema.name, scope)
            mode = "parallel" if tool is not None and tool.concurrency_safe is True else ""
            summary = schema.description.split("\n", 1)[0]
            print(f"{schema.name:<{width}}  {mode:<8}  {summary}".rstrip())
        if not schemas:
            print("(no tools)")
        transport = registry.get("run_code", scope)
        if transport is not None:  # the model reads the tools as this text, so show it
            print(f"\nrun_code's description (the SDK its programs call):\n\n"
                  f"{transport.description}")
        return 0
    print(json.dumps(_formatted(registry, schemas, scope, form), indent=2, ensure_ascii=False))
    return 0


def _formatted(registry: ToolRegistry, schemas: list[ToolSchema], scope: Hashable | None,
               form: str) -> Any:
    if form == "json":
        return [schema.to_dict() for schema in schemas]
    if form == "mcp":  # exactly the tools/list entries ``serve`` sends
        wire_tool = _mcp_extra("--format mcp", "toolrail.mcp._wire").wire_tool
        tools = [(schema, registry.get(schema.name, scope)) for schema in schemas]
        return [wire_tool(schema, tool) for schema, tool in tools if tool is not None]
    from .adapters import anthropic, gemini, openai

    if form == "openai":
        return openai.chat_tools(schemas)
    if form == "anthropic":
        return anthropic.tools(schemas)
    return gemini.function_declarations(schemas)


def _call(registry: ToolRegistry, name: str, raw: str | None, scope: Hashable | None,
          as_json: bool) -> int:
    if registry.get(name, scope) is None:
        known = ", ".join(s.name for s in registry.schemas(scope)) or "(none)"
        where = "" if scope is None else f" in scope {scope!r}"
        raise UsageError(f"unknown tool {name!r}{where}; available: {known}")
    arguments: Any = {}
    if raw is not None and raw.strip():
        try:
            arguments = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"the arguments are not valid JSON ({exc}); pass one JSON object, "
                             'e.g. \'{"path": "notes.txt"}\'') from None
    call = ToolCall(call_id="cli-1", name=name, arguments=arguments, scope=scope)
    result = asyncio.run(registry.execute(call))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        stream = sys.stderr if result.is_error else sys.stdout
        print(result.text, file=stream)
    return 1 if result.is_error else 0


def _serve(registry: ToolRegistry, scope: Hashable | None, http: str | None,
           max_request_bytes: int | None, stateless: bool = False) -> int:
    """Serve until the client closes stdin, or until SIGINT/SIGTERM: exit code 0 either way
    (the calls still running end ``ABORTED``), without a traceback."""
    if http is None and max_request_bytes is not None:
        raise UsageError("--max-request-bytes goes with --http (stdio has no request limit)")
    if http is None and stateless:
        raise UsageError("--stateless goes with --http (a stdio session is its process)")
    toolrail_mcp = _mcp_extra("serve", "toolrail.mcp")
    if http is None:
        asyncio.run(toolrail_mcp.serve_stdio(registry, scope=scope))
        return 0
    host, sep, port = http.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--http {http!r} is not HOST:PORT, e.g. 127.0.0.1:8000")
    limit = {} if max_request_bytes is None else {"max_request_bytes": max_request_bytes}
    asyncio.run(toolrail_mcp.serve_http(registry, host=host, port=int(port), scope=scope,
                                        stateless=stateless, **limit))
    return 0


def _mcp_extra(what: str, module: str) -> Any:
    """``module`` of ``toolrail.mcp``; a ``UsageError`` when the mcp extra is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{what} needs the mcp extra ({exc}): pip install 'toolrail[mcp]'") \
            from exc
