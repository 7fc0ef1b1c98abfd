"""``CodeSettings``: the limits of one ``run_code`` program (code-mode.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CodeSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeSettings:
    """Limits of a ``run_code`` program; importable without the ``code`` extra.

    >>> CodeSettings(max_calls=20).max_parallel
    10
    """

    max_duration: float = 30.0  # seconds of sandbox execution time
    max_memory: int = 256 * 1024 * 1024  # bytes of sandbox heap
    max_output_bytes: int = 1024 * 1024  # captured output plus the result's JSON
    max_calls: int = 200  # nested calls per program
    max_parallel: int = 10  # nested calls dispatching at once
    type_check: bool = True  # check the program against the SDK before it runs

    def __post_init__(self) -> None:
        duration = self.max_duration
        if isinstance(duration, bool) or not isinstance(duration, int | float) or not (
                math.isfinite(duration) and duration > 0):
            raise ValueError("CodeSettings.max_duration must be a positive finite number of "
                             "seconds")
        for field in ("max_memory", "max_output_bytes", "max_calls", "max_parallel"):
            value = getattr(self, field)
            if type(value) is not int or value < 1:
                raise ValueError(f"CodeSettings.{field} must be a positive integer")
        if type(self.type_check) is not bool:
            raise TypeError("CodeSettings.type_check must be a bool")
