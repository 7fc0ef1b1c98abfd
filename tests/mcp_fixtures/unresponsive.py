"""A stdio "MCP server" that starts, keeps running and never answers ``initialize``.

    python unresponsive.py silent NOTES     # reads nothing, writes nothing to stdout
    python unresponsive.py stubborn NOTES   # the same, and outlives SIGTERM
    python unresponsive.py garbage NOTES    # two lines that are not JSON-RPC, then reads on

It appends to the file NOTES its pid once it runs (and ``SIGTERM`` when it gets one,
as ``stubborn``), and writes one line to stderr. Then it sleeps, whatever its stdin does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def main() -> None:
    mode, notes = sys.argv[1], sys.argv[2]

    def note(text: str) -> None:
        with open(notes, "a", encoding="utf-8") as file:
            file.write(text + "\n")

    if mode == "stubborn":
        signal.signal(signal.SIGTERM, lambda signum, frame: note("SIGTERM"))
    note(str(os.getpid()))
    print(f"{mode}: waiting for a licence server", file=sys.stderr, flush=True)
    if mode == "garbage":
        print("Loading model weights...\nready on stdio!", flush=True)
        threading.Thread(target=sys.stdin.read, daemon=True).start()  # reads, never answers
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
