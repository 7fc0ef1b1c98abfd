"""Code mode (code-mode.md): the ``run_code`` transport, its SDK and its sandbox.

``CodeSettings`` and ``render_sdk`` need nothing beyond toolrail; running programs
needs the ``code`` extra (``pip install 'toolrail[code]'``: ``pydantic-monty``), which
is imported only when a registry presents a scope in ``"code"`` or ``"both"`` mode.
"""

from __future__ import annotations

from ._sdk import render_sdk
from ._settings import CodeSettings

__all__ = ["CodeSettings", "render_sdk"]
