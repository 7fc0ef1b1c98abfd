"""Tickets on DBOS's database: a parked call's request, and a person's one answer to it.

Two tables of toolrail's own, beside DBOS's (durable.md, "Who answers"):

- ``toolrail_tickets``: one row per ticket, the request as it was first asked (its
  digest is the one the person saw), ``waiting`` until its call is settled without an
  answer (``withdrawn``);
- ``toolrail_answers``: one row per answered ticket, who answered and when. Its primary
  key makes a second answer fail, and an answer is written only while its ticket is
  ``waiting``, in the same transaction: an answer is final, and a withdrawn ticket takes
  none.

A parked call waits for its answer through ``AnswerWatch``: one thread per process that
asks the database, every 50 ms, for the answers of every ticket its process waits for
(one query for a thousand parked calls). DBOS's own waits on SQLite poll once per waiter
per interval; its messages and events are not used here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Final

import sqlalchemy as sa

from ._shared import ANSWERED, WAITING, WITHDRAWN

__all__ = ["ANSWERED", "MISSING", "SCHEMA", "WAITING", "WITHDRAWN", "AnswerWatch", "answer",
           "ask", "list_tickets", "withdraw"]

TICKETS: Final = "toolrail_tickets"
ANSWERS: Final = "toolrail_answers"
SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {TICKETS} (ticket TEXT PRIMARY KEY, request TEXT NOT NULL, "
    "asked_at DOUBLE PRECISION NOT NULL, state TEXT NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {ANSWERS} (ticket TEXT PRIMARY KEY, outcome TEXT NOT NULL, "
    "answered_by TEXT, answered_at DOUBLE PRECISION NOT NULL)",
)
MISSING: Final = "missing"
POLL: Final = 0.05  # s between two looks for the answers a process waits for


def ask(engine: Any, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Record ticket ``request["ticket"]`` unless it was asked before: the request as
    first asked, and the ticket's state."""
    ticket = request["ticket"]
    with engine.begin() as connection:
        connection.execute(
            sa.text(f"INSERT INTO {TICKETS} (ticket, request, asked_at, state) "
                    "VALUES (:ticket, :request, :asked_at, :state) "
                    "ON CONFLICT (ticket) DO NOTHING"),
            {"ticket": ticket, "request": json.dumps(request), "asked_at": request["asked_at"],
             "state": WAITING})
        first, state = connection.execute(
            sa.text(f"SELECT request, state FROM {TICKETS} WHERE ticket = :ticket"),
            {"ticket": ticket}).one()
    return json.loads(first), state


def answer(engine: Any, ticket: str, outcome: str, answered_by: str | None,
           answered_at: float) -> str:
    """Answer ``ticket`` if it waits for one, in one transaction: ``ANSWERED``, else why
    not, ``WITHDRAWN`` or ``MISSING`` (one answered already raises
    ``sqlalchemy.exc.IntegrityError``)."""
    with engine.begin() as connection:
        row = connection.execute(
            sa.text(f"SELECT state FROM {TICKETS} WHERE ticket = :ticket{_locked(engine)}"),
            {"ticket": ticket}).first()
        if row is None:
            return MISSING
        if row[0] != WAITING:
            return WITHDRAWN
        connection.execute(
            sa.text(f"INSERT INTO {ANSWERS} (ticket, outcome, answered_by, answered_at) "
                    "VALUES (:ticket, :outcome, :answered_by, :answered_at)"),
            {"ticket": ticket, "outcome": outcome, "answered_by": answered_by,
             "answered_at": answered_at})
    return ANSWERED


def withdraw(engine: Any, ticket: str) -> None:
    """Ticket ``ticket`` no longer waits (its call was settled without an answer), unless
    it was answered first."""
    with engine.begin() as connection:
        connection.execute(
            sa.text(f"SELECT state FROM {TICKETS} WHERE ticket = :ticket{_locked(engine)}"),
            {"ticket": ticket})
        connection.execute(
            sa.text(f"UPDATE {TICKETS} SET state = :withdrawn WHERE ticket = :ticket AND "
                    f"NOT EXISTS (SELECT 1 FROM {ANSWERS} WHERE ticket = :ticket)"),
            {"ticket": ticket, "withdrawn": WITHDRAWN})


def list_tickets(engine: Any, prefix: str, *, waiting_only: bool) -> list[
        tuple[str, str, dict[str, Any] | None, dict[str, Any]]]:
    """Every ticket whose ID starts with ``prefix``, oldest first, as ``(ticket, state,
    answer, request)`` (``answer`` ``None`` while there is none); with ``waiting_only``,
    only those that wait for an answer."""
    where = " AND t.state = :waiting AND a.ticket IS NULL" if waiting_only else ""
    with engine.begin() as connection:
        rows = connection.execute(
            sa.text(f"SELECT t.ticket, t.state, t.request, a.outcome, a.answered_by, "
                    f"a.answered_at FROM {TICKETS} t LEFT JOIN {ANSWERS} a "
                    "ON a.ticket = t.ticket WHERE substr(t.ticket, 1, :length) = :prefix"
                    f"{where} ORDER BY t.asked_at"),
            {"prefix": prefix, "length": len(prefix), "waiting": WAITING}).all()
    out = []
    for ticket, state, request, outcome, answered_by, answered_at in rows:
        found = None if outcome is None else {
            "outcome": outcome, "answered_by": answered_by, "answered_at": answered_at}
        out.append((ticket, ANSWERED if found else state, found, json.loads(request)))
    return out


def _locked(engine: Any) -> str:
    """Row locking for the ticket's check (SQLite's writers are serialized already)."""
    return "" if engine.dialect.name == "sqlite" else " FOR UPDATE"


class AnswerWatch:
    """The answers this process waits for, found by one thread's query every ``POLL`` s
    for all of them."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop,
                                            asyncio.Future[dict[str, Any]]]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    async def wait(self, ticket: str) -> dict[str, Any]:
        """The answer to ``ticket``, once there is one (or its ticket is withdrawn:
        then ``{"outcome": "cancelled"}``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        with self._lock:
            self._waiting.setdefault(ticket, []).append((loop, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="toolrail-answers",
                                                daemon=True)
                self._thread.start()
        self._wake.set()
        try:
            return await future
        finally:
            with self._lock:
                waiters = self._waiting.get(ticket, [])
                if (loop, future) in waiters:
                    waiters.remove((loop, future))
                if not waiters:
                    self._waiting.pop(ticket, None)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                tickets = list(self._waiting)
            if not tickets:
                self._wake.wait(POLL)
                self._wake.clear()
                continue
            try:
                found = self._look(tickets)
            except sa.exc.SQLAlchemyError:  # the database is away: look again
                found = {}
            with self._lock:
                for ticket, out in found.items():
                    for loop, future in self._waiting.pop(ticket, []):
                        loop.call_soon_threadsafe(_settle, future, out)
            self._wake.wait(POLL)
            self._wake.clear()

    def _look(self, tickets: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        with self.engine.begin() as connection:
            for start in range(0, len(tickets), 500):
                rows = connection.execute(
                    sa.text(f"SELECT t.ticket, t.state, a.outcome, a.answered_by, "
                            f"a.answered_at FROM {TICKETS} t LEFT JOIN {ANSWERS} a "
                            "ON a.ticket = t.ticket WHERE t.ticket IN :tickets").bindparams(
                                sa.bindparam("tickets", expanding=True)),
                    {"tickets": tickets[start:start + 500]})
                for ticket, state, outcome, answered_by, answered_at in rows:
                    if outcome is not None:
                        found[ticket] = {"outcome": outcome, "answered_by": answered_by,
                                         "answered_at": answered_at}
                    elif state == WITHDRAWN:
                        found[ticket] = {"outcome": "cancelled", "answered_by": None,
                                         "answered_at": None}
        return found


def _settle(future: asyncio.Future[dict[str, Any]], out: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(out)
