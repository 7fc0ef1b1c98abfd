"""The work every framework runs: the tool bodies, their arguments, one model step."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "ARGS",
    "ARGS_JSON",
    "IO_SECONDS",
    "STEP_SIZE",
    "read",
    "read_sync",
    "typed_functions",
    "wait",
]

ARGS: dict[str, Any] = {"path": "/tmp/notes.txt", "offset": 3, "limit": 10}
ARGS_JSON = json.dumps(ARGS)
STEP_SIZE = 10
IO_SECONDS = 0.005


async def read(path: str, offset: int, limit: int) -> str:
    """Read part of a file.

    Args:
        path: The file to read.
        offset: The first line to read.
        limit: How many lines to read.
    """
    return path


def read_sync(path: str, offset: int, limit: int) -> str:
    """Read part of a file.

    Args:
        path: The file to read.
        offset: The first line to read.
        limit: How many lines to read.
    """
    return path


async def wait(index: int) -> str:
    """Wait for a slow service.

    Args:
        index: Which request this is.
    """
    await asyncio.sleep(IO_SECONDS)  # stands for I/O
    return "done"


def typed_functions(count: int, tag: str) -> list[Callable[..., Any]]:
    """``count`` distinct 3-parameter async functions, as a real module would define them.

    Fresh function objects for every round, so no framework reuses work cached on one.
    """
    source = "\n".join(
        f"async def {tag}_{i}(path: str, offset: int, limit: int) -> str:\n"
        f"    '''Read part of file number {i}.\n\n    Args:\n        path: The file.\n"
        "        offset: The first line.\n        limit: How many lines.\n    '''\n"
        "    return path\n"
        for i in range(count)
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    return [namespace[f"{tag}_{i}"] for i in range(count)]
