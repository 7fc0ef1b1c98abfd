"""Test-session options (the ``soak`` marker and ``--soak-full``) and shared fixtures.

The soak tests (tests/test_soak.py) run a small version by default; ``--soak-full`` or
``TOOLRAIL_SOAK=full`` runs the full one (see docs/guarantees.md).

Fixtures: ``registry`` (a fresh ``ToolRegistry``) and ``log`` (a ``helpers.Recorder``); a
test file may define its own fixture of the same name, which then wins. The durable tests'
``backend`` (DBOS or Temporal, each test on both) and ``temporal_server`` (a dev server
for the session, skipped with the reason where it cannot start) import their helpers
only when used: the rest of the suite needs neither engine. So do ``postgres_url`` (a
PostgreSQL server for the session, ``durable_fixtures/postgres.py``: the URL of its
database, skipped with the reason where no binaries start one) and ``postgres_database``
(a new database on it for one test, dropped after it: its URL).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolrail as tr
from helpers import Recorder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-full",
        action="store_true",
        default=False,
        help="run the soak tests at full size (10 000 calls, 100 batches of 100)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "soak: memory soak tests; small by default, full with --soak-full"
    )



@pytest.fixture
def registry() -> tr.ToolRegistry:
    return tr.ToolRegistry()


@pytest.fixture
def log() -> Recorder:
    return Recorder()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if importlib.util.find_spec("temporalio") is None:
        pytest.skip("temporalio is not installed (toolrail[temporal])")
    from durable_helpers import TemporalServer

    server = TemporalServer(tmp_path_factory.mktemp("temporal"))
    try:
        asyncio.run(server.start())
    except Exception as exc:
        pytest.skip(f"the Temporal dev server did not start: {exc}")
    try:
        yield server.target
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed (toolrail[dbos])")
    from durable_fixtures.postgres import PostgresUnavailable, start_server

    try:
        server = start_server()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server.url()
    finally:
        server.stop()


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    from durable_fixtures.postgres import create_database, drop_database

    url = create_database(postgres_url)
    yield url
    drop_database(url)


@pytest.fixture(params=["dbos", "temporal"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """The engine a durable test's agents run on: each test runs on both."""
    from durable_helpers import Engine

    if request.param == "dbos":
        return Engine("dbos", tmp_path)
    return Engine("temporal", tmp_path, request.getfixturevalue("temporal_server"))
