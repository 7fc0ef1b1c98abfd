"""Many agent processes on one DBOS database: who is alive, and who takes over the dead.

Each process is a DBOS executor of its own (``executor_id``: unique, or given for a
process slot that restarts). DBOS's launch recovers only its own executor's pending
workflows, so a second process never touches a live one's steps. What DBOS leaves to its
operator, deciding that an executor is dead, is this module's one job:

- each process keeps a row in ``toolrail_executors`` fresh (its ``beat``, the database's
  clock) from a thread of its own, so a body that blocks the event loop does not look
  like a dead process (and a second thread does the takeovers below, so that they do
  not delay the beat);
- every ``beat`` interval (and once at launch) each process looks for the dead: rows
  older than ``takeover_after``, or of a process of this host that is gone; the one whose
  conditional update claims such a row (its ``beat`` unchanged since it was read:
  exactly one claim succeeds) hands that executor's pending workflows back to DBOS
  (``DBOS._recover_pending_workflows``), which re-enqueues them; DBOS's queue then lets
  exactly one live process start each one. The row is deleted after. A claimer that dies
  half-way leaves a row that goes stale again, and the next claimer repeats the
  (idempotent) recovery.

No clock but the database's is compared, so processes on machines whose clocks differ
agree on who is stale.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final

import sqlalchemy as sa

from ._tickets import SCHEMA

__all__ = ["Liveness", "connect"]

_log = logging.getLogger("toolrail.durable")

TABLE: Final = "toolrail_executors"
_SCHEMA_LOCK: Final = 0x746F6F6C7261696C  # "toolrail": the advisory lock of its schema
_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (executor_id TEXT PRIMARY KEY, "
    "host TEXT NOT NULL, pid INTEGER NOT NULL, beat DOUBLE PRECISION NOT NULL, taker TEXT)",
    *SCHEMA,
)


def connect(database: str, engine: Any = None) -> Any:
    """A SQLAlchemy engine on ``database``, checked by a first connection that creates
    toolrail's tables (this module's and ``_tickets``'): a URL that cannot be opened is
    a ``ValueError`` naming ``database=``, not a driver's trace."""
    if engine is None:
        try:
            url = sa.engine.make_url(database)
        except sa.exc.ArgumentError:
            raise ValueError(f"database={database!r} is not a database URL (sqlite:///<path> "
                             "or postgresql://<user>@<host>/<name>)") from None
        if url.drivername == "postgresql":  # DBOS's driver: psycopg 3
            url = url.set(drivername="postgresql+psycopg")
        engine = sa.create_engine(url, pool_pre_ping=True)
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                # CREATE TABLE IF NOT EXISTS races with itself on Postgres (processes
                # launching at once on a new database): one at a time
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": _SCHEMA_LOCK})
            for statement in _SCHEMA:
                connection.execute(sa.text(statement))
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ValueError(f"database={database!r} cannot be opened: {reason}") from None
    return engine


def _now(engine: Any) -> str:
    """The database's clock, in seconds since the epoch, as SQL."""
    if engine.dialect.name == "sqlite":
        return "((julianday('now') - 2440587.5) * 86400.0)"
    return "extract(epoch from clock_timestamp())"


class Liveness:
    """This process's row in ``toolrail_executors``, kept fresh, and the takeover of
    the dead (see the module's docstring)."""

    def __init__(self, engine: Any, executor_id: str | None, takeover_after: float,
                 recover: Callable[[list[str]], object]) -> None:
        self.engine = engine
        self.given = executor_id is not None
        self.executor_id = executor_id or f"toolrail-{uuid.uuid4().hex}"
        self.takeover_after = takeover_after
        self.every = min(1.0, takeover_after / 4)
        self._recover = recover
        self._host = socket.gethostname()
        self._now = _now(engine)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def claim(self) -> None:
        """Write this process's row. A given ``executor_id`` that a live process holds is
        refused, naming that process; one whose process died on this host is taken at
        once (its pending steps are then DBOS's own startup recovery's)."""
        with self.engine.begin() as connection:
            row = connection.execute(
                sa.text(f"SELECT host, pid, {self._now} - beat FROM {TABLE} "
                        "WHERE executor_id = :id"), {"id": self.executor_id}).first()
            if row is not None:
                host, pid, age = row
                dead_here = host == self._host and not _running(pid)
                if age < self.takeover_after and not dead_here:
                    raise RuntimeError(
                        f"executor_id={self.executor_id!r} is held by a live agent process "
                        f"(pid {pid} on {host}, seen {max(age, 0.0):.1f} s ago): give each "
                        "process its own executor_id, or none for a unique one")
            self._enter(connection)

    def _enter(self, connection: Any) -> None:
        """(Re)write this process's row, beaten now."""
        connection.execute(sa.text(f"DELETE FROM {TABLE} WHERE executor_id = :id"),
                           {"id": self.executor_id})
        connection.execute(
            sa.text(f"INSERT INTO {TABLE} (executor_id, host, pid, beat) "
                    f"VALUES (:id, :host, :pid, {self._now})"),
            {"id": self.executor_id, "host": self._host, "pid": os.getpid()})

    def start(self) -> None:
        """Beat from one thread, look for the dead from another: a long takeover (DBOS
        re-enqueues a dead process's steps one by one) never delays this process's
        beat."""
        self._threads = [
            threading.Thread(target=self._every, args=(self.beat,), daemon=True,
                             name="toolrail-liveness"),
            threading.Thread(target=self._every, args=(self.take_over,), daemon=True,
                             name="toolrail-takeover")]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop beating, and leave the row stale at once: a step this process leaves
        unfinished is taken over by a live process without the usual wait (or by this
        slot's next launch, for a given ``executor_id``)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        try:
            with self.engine.begin() as connection:
                connection.execute(sa.text(f"UPDATE {TABLE} SET beat = 0 "
                                           "WHERE executor_id = :id AND taker IS NULL"),
                                   {"id": self.executor_id})
        except sa.exc.SQLAlchemyError:  # the next claim sees it stale anyway
            _log.warning("toolrail: could not mark executor %s stopped", self.executor_id)
        self.engine.dispose()

    def _every(self, work: Callable[[], object]) -> None:
        while not self._stop.wait(self.every):
            try:
                work()
            except Exception as exc:  # the database is away, DBOS not launched yet: again
                _log.warning("toolrail: liveness of executor %s: %s", self.executor_id, exc)

    def beat(self) -> None:
        with self.engine.begin() as connection:
            done = connection.execute(
                sa.text(f"UPDATE {TABLE} SET beat = {self._now} "
                        "WHERE executor_id = :id AND taker IS NULL"),
                {"id": self.executor_id})
            if done.rowcount == 0:  # taken over while alive (stopped longer than allowed)
                _log.error(
                    "toolrail: executor %s was taken over while this process lived (it "
                    "was not seen for %.1f s): its steps may now run elsewhere too",
                    self.executor_id, self.takeover_after)
                self._enter(connection)

    def take_over(self) -> list[str]:
        """Claim and recover every executor that is dead: not seen for
        ``takeover_after``, or gone from this host (its pid is not running); the ones
        this process took over."""
        with self.engine.begin() as connection:
            rows = connection.execute(
                sa.text(f"SELECT executor_id, host, pid, beat, {self._now} - beat "
                        f"FROM {TABLE} WHERE executor_id != :me"),
                {"me": self.executor_id}).all()
        taken = []
        for dead, host, pid, beat, age in rows:
            if age < self.takeover_after and (host != self._host or _running(pid)):
                continue
            with self.engine.begin() as connection:
                claimed = connection.execute(  # exactly one claim of a beat succeeds
                    sa.text(f"UPDATE {TABLE} SET beat = {self._now}, taker = :me "
                            "WHERE executor_id = :dead AND beat = :beat"),
                    {"me": self.executor_id, "dead": dead, "beat": beat}).rowcount
            if claimed:
                self._recover([dead])
                with self.engine.begin() as connection:
                    connection.execute(
                        sa.text(f"DELETE FROM {TABLE} WHERE executor_id = :dead "
                                "AND taker = :me"), {"dead": dead, "me": self.executor_id})
                _log.info("toolrail: took over the steps of executor %s", dead)
                taken.append(dead)
        return taken


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
