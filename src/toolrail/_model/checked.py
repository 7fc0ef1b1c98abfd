"""``CheckedBody``: the protocol between the registry and bodies that check themselves.

The registry runs any callable as a body. A body that is a ``CheckedBody`` tells it
more, and the registry uses that without knowing what built the body (typed tools,
``_typed``, are the implementation): it can say ahead whether arguments would fail
(``check_arguments``: then nobody is asked to approve the call), it checks its own value
against ``output_schema``, and an async one runs in two halves so the hot path awaits
the user's coroutine directly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CheckedBody"]


class CheckedBody:
    """Base of bodies that check their own value against ``output_schema`` (typed tools).

    The registry then skips its JSON Schema check, unless the tool's ``output_schema``
    was replaced after the body was built. An async checked body also comes in two
    halves, so the hot path awaits the user's coroutine directly: ``start(arguments,
    context)`` validates and returns it, ``finish(name, value)`` converts its value.
    Calling the body itself does both.
    """

    __slots__ = ()
    output_schema: Any = None
    context_free = False  # the function never sees its RunContext

    def check_arguments(self, arguments: Any) -> Exception | None:
        """The error the body would raise for ``arguments`` before it runs, if any."""
        return None

    def start(self, arguments: Any, context: Any) -> Any:
        raise NotImplementedError

    def finish(self, name: str, value: Any) -> Any:
        raise NotImplementedError
