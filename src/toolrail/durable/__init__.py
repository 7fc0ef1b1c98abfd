"""Durable steps and approvals on engines users already run (durable.md).

>>> from toolrail import durable
>>> durable.PENDING
durable.PENDING
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._journal import PENDING

if TYPE_CHECKING:
    from ._dbos import DBOS, Approvals, DurableStream, PendingApproval

__all__ = ["DBOS", "PENDING", "Approvals", "DurableStream", "PendingApproval"]


def __getattr__(name: str) -> Any:
    """The DBOS engine loads on first use: ``toolrail[dbos]`` is an optional extra."""
    if name in ("DBOS", "Approvals", "DurableStream", "PendingApproval"):
        try:
            from . import _dbos
        except ImportError as exc:
            raise ImportError(
                f"toolrail.durable.{name} needs DBOS: pip install 'toolrail[dbos]'") from exc
        return getattr(_dbos, name)
    raise AttributeError(f"module 'toolrail.durable' has no attribute {name!r}")
