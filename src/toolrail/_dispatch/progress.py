"""Progress a tool body reports while it runs: ``Progress`` and its delivery.

``RunContext.report_progress(progress, total=None, message=None)`` hands one
``Progress`` to the ``on_progress`` listeners the call's scope sees (the registry's,
and those added through that scope, in registration order, as observers are filtered).
Listeners are synchronous and run on the event loop's thread: a report from a worker
thread is delivered there, in order. Progress is never stored and never part of the
result; a listener that raises (or returns an awaitable) is logged once at WARNING on
the registry's logger and the others still run (``RunContext``'s delivery, in
``execution``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Progress", "checked_progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress report: ``progress`` so far, of ``total`` when known."""

    progress: float
    total: float | None = None
    message: str | None = None


def checked_progress(progress: Any, total: Any, message: Any) -> Progress:
    """A ``Progress`` from a body's arguments, or ``TypeError``/``ValueError`` saying why."""
    for name, number in (("progress", progress), ("total", total)):
        if number is None and name == "total":
            continue
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise TypeError(f"report_progress() {name} must be a number, got "
                            f"{type(number).__name__}")
        if not math.isfinite(number):
            raise ValueError(f"report_progress() {name} must be finite, got {number!r}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"report_progress() message must be a str or None, got "
                        f"{type(message).__name__}")
    return Progress(float(progress), None if total is None else float(total),
                    None if message is None else str.__str__(message))
