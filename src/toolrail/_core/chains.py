"""The ordered chains: pre-execute, around-execute, post-execute, observers, progress.

Each stage keeps one list of registrations, outermost first, interleaving the
registry's and every scope's in registration order (``prepend`` puts one at the very
front). A call sees the registrations made for every call plus those of its own scope;
that filtered tuple is cached per scope and rebuilt only when the stage changes, so a
stage start costs one dictionary lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Final, TypeAlias, TypeVar

from .._model.disposer import Disposer
from .._model.foreign import discard, is_awaitable, message_of

__all__ = ["AROUND", "POST", "PRE", "PROGRESS", "RESULT", "Chains", "Stage", "notify", "walk"]

T = TypeVar("T")

# The stages, as plain ints: the hot path reads one per stage, and an enum member costs
# a class attribute lookup each time.
Stage: TypeAlias = int
PRE: Final = 0
AROUND: Final = 1
POST: Final = 2
RESULT: Final = 3
PROGRESS: Final = 4  # on_progress listeners (``_dispatch.progress``)


class _Link:
    __slots__ = ("fn", "scope")

    def __init__(self, fn: Callable[..., Any], scope: Hashable | None) -> None:
        self.fn = fn
        self.scope = scope  # None: every call


class Chains:
    """The registered middleware and observers of one registry."""

    __slots__ = ("_cache", "_links", "_scoped", "every", "quiet")

    def __init__(self) -> None:
        # No pre-, around- or post-execute middleware at all, in any scope: a call
        # without any (the common case) reads this instead of looking up three chains.
        self.quiet = True
        self._links: list[list[_Link]] = [[] for _ in range(5)]
        # Each stage's chain for a call in no scope (``for_call(stage, None)``).
        self.every: list[tuple[Callable[..., Any], ...]] = [() for _ in range(5)]
        self._scoped: list[dict[Hashable, int]] = [{} for _ in range(5)]
        self._cache: list[dict[Hashable, tuple[Callable[..., Any], ...]]] = [
            {} for _ in range(5)]

    def add(self, stage: Stage, fn: Callable[..., Any], scope: Hashable | None,
            prepend: bool) -> Disposer:
        if not callable(fn):
            raise TypeError(f"middleware and observers must be callable, got {type(fn).__name__}")
        link = _Link(fn, scope)
        links = self._links[stage]
        if prepend:
            links.insert(0, link)
        else:
            links.append(link)
        if scope is not None:
            counts = self._scoped[stage]
            counts[scope] = counts.get(scope, 0) + 1
        self._rebuild(stage)

        def remove() -> None:
            for i, candidate in enumerate(links):
                if candidate is link:
                    del links[i]
                    break
            if scope is not None:
                counts = self._scoped[stage]
                left = counts[scope] - 1
                if left:
                    counts[scope] = left
                else:
                    del counts[scope]
            self._rebuild(stage)

        return Disposer(remove)

    def for_call(self, stage: Stage, scope: Hashable | None) -> tuple[Callable[..., Any], ...]:
        """The chain a call in ``scope`` sees, outermost first, as it stands now (a scope
        that cannot be hashed has none of its own: its call is an error result)."""
        try:
            if scope is None or scope not in self._scoped[stage]:
                return self.every[stage]
        except Exception:
            return self.every[stage]
        cache = self._cache[stage]
        chain = cache.get(scope)
        if chain is None:
            chain = cache[scope] = tuple(
                link.fn for link in self._links[stage]
                if link.scope is None or link.scope == scope
            )
        return chain

    def _rebuild(self, stage: Stage) -> None:
        self.every[stage] = tuple(link.fn for link in self._links[stage] if link.scope is None)
        self._cache[stage] = {}
        links = self._links
        self.quiet = not (links[PRE] or links[AROUND] or links[POST])


async def walk(chain: tuple[Callable[..., Any], ...], args: tuple[Any, ...],
               innermost: Callable[[], Awaitable[T]], plain: Callable[[Any], bool],
               accept: Callable[[Any], T]) -> T:
    """Run one stage's chain, outermost first, walked by index.

    Link ``i`` is called as ``link(*args, call_next)``; ``call_next()`` runs the rest of
    the chain (``innermost`` after the last link) and may be awaited more than once.
    What a link returns is awaited when it is awaitable (``plain`` says, by its type,
    which values are not) and handed to ``accept``, which returns the stage's decision
    or raises ``Invalid`` with the stage's message.
    """
    last = len(chain)

    async def at(i: int) -> T:
        if i == last:
            return await innermost()
        out = chain[i](*args, lambda: at(i + 1))
        if not plain(out) and is_awaitable(out):
            out = await out
        return accept(out)

    return await at(0)


def notify(logger: logging.Logger, listeners: tuple[Callable[..., Any], ...],
           execution: Any, payload: Any, role: str = "result observer",
           synchronous: str = "observers must be synchronous") -> None:
    """Call each synchronous listener with ``(execution, payload)``; one that raises, or
    returns an awaitable (closed here), is logged at WARNING as ``tool "<name>"
    (<call_id>): <role> failed: <message>`` and the others still run. Shared by result
    observers and progress listeners (``_dispatch.progress``)."""
    for listener in listeners:
        try:
            out = listener(execution, payload)
        except Exception as exc:
            message = message_of(exc)
        else:
            if out is None or not is_awaitable(out):
                continue
            discard(out)
            message = synchronous
        logger.warning('tool "%s" (%s): %s failed: %s', execution._name,
                       execution._call_id, role, message)
