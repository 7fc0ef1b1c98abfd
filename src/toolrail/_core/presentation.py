"""Presentation modes (code-mode.md, "Presentation"): what a scope's model is offered.

``"native"`` offers the visible tools; ``"code"`` offers only the reserved ``run_code``
transport, whose programs call the tools as nested calls; ``"both"`` offers the tools
and ``run_code`` last. The registry keeps the modes; this module holds their checks and
exact messages, so the core needs nothing from ``toolrail.code`` until a scope presents
code.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Final, Literal

__all__ = ["MODES", "RUN_CODE", "Mode", "check_mode", "collapsed", "require_code_extra"]

Mode = Literal["native", "code", "both"]
MODES: Final = ("native", "code", "both")
RUN_CODE: Final = "run_code"

RESERVED: Final = (
    f'tool name "{RUN_CODE}" is reserved for the code mode transport and cannot be registered '
    "or shadowed"
)
RESTRICTED: Final = (
    f'restrict() cannot name the code mode transport "{RUN_CODE}"; restrict the tools it '
    "calls instead"
)


def check_mode(mode: Any) -> Mode:
    """``mode`` when it is a presentation mode, else the spec's ``ValueError``."""
    if type(mode) is str and mode in MODES:
        return mode  # type: ignore[return-value]
    raise ValueError(f'presentation must be "native", "code" or "both", got {mode!r}')


def require_code_extra() -> None:
    """Raise ``ImportError`` unless ``pydantic_monty`` (the ``code`` extra) is importable."""
    try:
        found = importlib.util.find_spec("pydantic_monty") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError("code mode needs the \"code\" extra: pip install 'toolrail[code]'")


def conflict(mode: str, active: str) -> ValueError:
    return ValueError(
        f'present_as("{mode}") conflicts with "{active}" already declared for this scope; '
        "one scope presents its tools one way"
    )


def collapsed(name: str) -> str:
    """The message of a model-direct call of a native tool in code mode."""
    return (f'unknown tool "{name}": only {RUN_CODE} is callable directly; call {name} from '
            f"inside a {RUN_CODE} program instead")
