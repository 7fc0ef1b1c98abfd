"""The engines the durable tests run on: DBOS always; Temporal on a dev server that one
fixture starts for the session, skipped (with the reason) where it cannot start."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_helpers import Engine, TemporalServer


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if importlib.util.find_spec("temporalio") is None:
        pytest.skip("temporalio is not installed (toolrail[temporal])")
    server = TemporalServer(tmp_path_factory.mktemp("temporal"))
    try:
        asyncio.run(server.start())
    except Exception as exc:
        pytest.skip(f"the Temporal dev server did not start: {exc}")
    try:
        yield server.target
    finally:
        server.stop()


@pytest.fixture(params=["dbos", "temporal"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    if request.param == "dbos":
        return Engine("dbos", tmp_path)
    return Engine("temporal", tmp_path, request.getfixturevalue("temporal_server"))
