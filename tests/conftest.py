"""Test-session options (the ``soak`` marker and ``--soak-full``) and shared fixtures.

The soak tests (tests/test_soak.py) run a small version by default; ``--soak-full`` or
``TOOLRAIL_SOAK=full`` runs the full one (see docs/guarantees.md).

Fixtures: ``registry`` (a fresh ``ToolRegistry``) and ``log`` (a ``helpers.Recorder``); a
test file may define its own fixture of the same name, which then wins.
"""

from __future__ import annotations

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
