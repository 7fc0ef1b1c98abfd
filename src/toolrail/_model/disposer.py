"""``Disposer``: the handle every registration returns."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

__all__ = ["Disposer"]


class Disposer:
    """Undoes one registration when called; later calls do nothing.

    Also a context manager that disposes on exit::

        with registry.guard(no_rm) as disposer:
            ...
        assert disposer.disposed
    """

    __slots__ = ("_undo",)

    def __init__(self, undo: Callable[[], None] | None) -> None:
        self._undo = undo

    @property
    def disposed(self) -> bool:
        """Whether the registration has been undone."""
        return self._undo is None

    def __call__(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> Disposer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self()

    def __repr__(self) -> str:
        return f"<Disposer {'disposed' if self._undo is None else 'active'}>"
