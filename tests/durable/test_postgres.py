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
