"""Each integration is an optional extra: absent framework, clear ImportError; and its bench."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODULES = [
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("openai_agents", "agents", "openai-agents"),
    ("langchain", "langchain_core", "langchain"),
]


@pytest.mark.parametrize(("module", "framework", "extra"), MODULES)
def test_an_integration_without_its_framework_names_the_extra(
        module: str, framework: str, extra: str) -> None:
    script = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        "import toolrail, toolrail.integrations\n"
        f"import toolrail.integrations.{module}\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 1
    assert (f"ImportError: toolrail.integrations.{module} needs the {extra} extra: "
            f"pip install 'toolrail[{extra}]'") in done.stderr


def test_importing_toolrail_imports_no_framework() -> None:
    script = (
        "import sys, toolrail, toolrail.integrations\n"
        "print(sorted({'pydantic_ai', 'agents', 'langchain_core'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, check=True)
    assert done.stdout.strip() == "[]"


def test_the_integrations_benchmark_prints_a_bar_per_framework() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_integrations
    finally:
        sys.path.remove(str(ROOT))
    figures = asyncio.run(bench_integrations.main(quick=True))
    lines = bench_integrations.bars(figures)
    assert [line.split()[0] for line in lines] == ["pydantic-ai", "openai-agents", "langchain"]
    assert all(line.endswith("(bar: at most 5 µs)") for line in lines)
