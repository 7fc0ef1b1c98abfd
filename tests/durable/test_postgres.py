"""durable.md on DBOS with a real PostgreSQL database (the ``postgres_database`` fixture):
a step is recorded there, and another process answers its approval."""

from __future__ import annotations

import asyncio
import sys

import pytest

from durable_helpers import WAIT, Tools, calls
from toolrail import durable

pytestmark = pytest.mark.timeout(60)

# Another process: answers the one waiting approval of engine "unit" and prints its ticket.
ANSWER = """
import asyncio, sys
from toolrail import durable

async def answer():
    approvals = durable.Approvals(sys.argv[1], prefix="unit:")
    try:
        (approval,) = await approvals.pending()
        await approvals.resume(approval.ticket, "allowed-once")
    finally:
        approvals.close()
    print(approval.ticket)

asyncio.run(answer())
"""


async def test_a_step_on_postgres_is_recorded_and_running_it_again_returns_the_record(
        postgres_database: str) -> None:
    tools = Tools()
    async with durable.DBOS(tools.registry, name="unit", database=postgres_database) as engine:
        batch = await engine.run("s", calls("echo", "echo"))
        assert [r.text for r in batch.results] == ["echo 0", "echo 1"]
        assert await engine.run("s", calls("echo", "echo")) == batch
    assert len(tools.ran) == 2


async def test_another_process_answers_an_approval_on_the_same_database(
        postgres_database: str) -> None:
    tools = Tools()
    async with durable.DBOS(tools.registry, name="unit", database=postgres_database) as engine:
        step = asyncio.ensure_future(engine.run("s", calls("echo", "delete")))
        async with asyncio.timeout(WAIT):
            while not await engine.pending():  # noqa: ASYNC110 (the record is in the database)
                await asyncio.sleep(0.01)
        answer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", ANSWER, postgres_database,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(answer.communicate(), WAIT)
        assert answer.returncode == 0, err.decode()
        assert out.decode().strip() == "unit:s/1"
        batch = await asyncio.wait_for(step, WAIT)
    assert [r.text for r in batch.results] == ["echo 0", "delete 1"]
    assert ("delete", {"x": 1}) in tools.ran


def test_agents_opening_a_new_database_at_once_all_open_it(postgres_database: str) -> None:
    """toolrail's tables are created by whichever process opens the database first;
    CREATE TABLE IF NOT EXISTS races with itself on Postgres, so it is done under an
    advisory lock. Six connections at once, behind a barrier, on a new database."""
    import threading

    from toolrail.durable._liveness import connect

    barrier = threading.Barrier(6)
    failures: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            connect(postgres_database).dispose()
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


async def test_the_inbox_of_a_database_no_agent_has_opened_is_empty(
        postgres_database: str) -> None:
    approvals = durable.Approvals(postgres_database, prefix="unit:")
    try:
        assert await approvals.pending(history=True) == []
        with pytest.raises(KeyError):
            await approvals.resume("unit:s/0", "allowed-once")
    finally:
        approvals.close()
