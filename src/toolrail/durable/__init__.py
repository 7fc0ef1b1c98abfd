"""Durable steps and approvals on engines users already run (durable.md).

>>> from toolrail import durable
>>> durable.PENDING
durable.PENDING
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._journal import PENDING, Answer, DurableApprover, answer
from ._shared import PendingApproval

if TYPE_CHECKING:
    from ._dbos import DBOS, Approvals, DurableStream, sqlite_engine
    from ._temporal import Temporal

__all__ = ["DBOS", "PENDING", "Answer", "Approvals", "DurableApprover", "DurableStream",
           "PendingApproval", "Temporal", "answer", "sqlite_engine"]

_ENGINES = {"DBOS": ("_dbos", "dbos"), "Approvals": ("_dbos", "dbos"),
            "DurableStream": ("_dbos", "dbos"), "sqlite_engine": ("_dbos", "dbos"),
            "Temporal": ("_temporal", "temporal")}


def __getattr__(name: str) -> Any:
    """An engine loads on first use: ``toolrail[dbos]`` and ``toolrail[temporal]`` are
    optional extras."""
    where = _ENGINES.get(name)
    if where is None:
        raise AttributeError(f"module 'toolrail.durable' has no attribute {name!r}")
    module, extra = where
    import importlib

    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ImportError as exc:
        raise ImportError(f"toolrail.durable.{name} needs the {extra} extra: pip install "
                          f"'toolrail[{extra}]'") from exc
    return getattr(loaded, name)
