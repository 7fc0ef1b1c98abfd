"""Helpers of the durable tests: an agent process to start, read, and ``kill -9``."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable tests need toolrail[dbos]")

AGENT = Path(__file__).parent / "durable_fixtures" / "agent.py"
WAIT = 30.0  # seconds an event may take to come: a bound for a hang, not a timing


class Agent:
    """One agent process (``durable_fixtures/agent.py``) running a durable step."""

    def __init__(self, workdir: Path, step_id: str, calls: list[list[Any]],
                 **env: str) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.process = subprocess.Popen(
            [sys.executable, str(AGENT), str(workdir), step_id, json.dumps(calls)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **env})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def wait_for(self, event: str, **fields: Any) -> dict[str, Any]:
        """The first event named ``event`` with ``fields`` (earlier ones are kept)."""
        for seen in self.seen:
            if seen["event"] == event and all(seen.get(k) == v for k, v in fields.items()):
                return seen
        while True:
            try:
                got = self.events.get(timeout=WAIT)
            except queue.Empty:
                self.kill()
                raise AssertionError(f"no {event} event in {WAIT} s; saw {self.seen}") from None
            if got is None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                self._close()
                raise AssertionError(f"the agent exited ({self.process.wait()}) before a "
                                     f"{event} event; saw {self.seen}\n{stderr}")
            self.seen.append(got)
            if got["event"] == event and all(got.get(k) == v for k, v in fields.items()):
                return got

    def batch(self) -> list[dict[str, Any]]:
        """The step's results; the process has then exited 0."""
        results = self.wait_for("batch")["results"]
        code = self.process.wait(timeout=WAIT)
        self._close()
        assert code == 0
        return list(results)

    def kill(self) -> None:
        """``kill -9``, and reap it."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT)
        self._close()

    def _close(self) -> None:
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def wait_until_dispatched(database: str, workflow_id: str, text: str) -> None:
    """Until the DBOS record of ``workflow_id`` holds a call's dispatch outcome whose
    text is ``text`` (the call finished its body; its result is not committed yet)."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=database)
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for step in client.list_workflow_steps(workflow_id):
                output = step["output"]
                if isinstance(output, dict) and "phase" in output and texts(
                        [output["result"]]) == [text]:
                    return
            time.sleep(0.02)
        raise AssertionError(f"no dispatch of {text!r} was recorded in {WAIT} s")
    finally:
        client.destroy()


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def texts(results: list[dict[str, Any]]) -> list[str]:
    return ["".join(b["text"] for b in r["content"] if b["type"] == "text") for r in results]
