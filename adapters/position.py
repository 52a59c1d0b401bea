"""What an adapter keeps on disk between runs: its confirmed position and its spool.

A position is stored only after the broker acked every message up to it. A stale
position costs duplicates, never a loss (the broker dedups by (channel, msg_id) and
answers `duplicate`), so a position file is replaced atomically (write, rename) but
not fsynced. A spooled message stays on disk from the moment it was read from the
server until the broker acked it, and on start the spool is sent again, in order: for
servers that keep no history (IRC), a kill -9 between the server's message and the ack
loses nothing. The spool survives a crash of the process, not of the machine (no
fsync: a message read from a socket was never durable anyway).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


class PositionStore:
    """Small named positions (a MAM archive id, a sync token), one JSON file.

    `put` only records; `flush` writes (its owner calls it every fraction of a
    second and at the end): a position a little behind costs a
    few duplicates after a crash, and a file rename per message costs
    milliseconds.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._dirty = False
        self._values: dict[str, Any] = {}
        with contextlib.suppress(FileNotFoundError):
            loaded = orjson.loads(path.read_bytes())
            if isinstance(loaded, dict):
                self._values = loaded

    def get(self, key: str) -> Any:
        return self._values.get(key)

    def put(self, key: str, value: Any) -> None:
        """Record `value` under `key` (call it after the broker's ack)."""
        if self._values.get(key) != value:
            self._values[key] = value
            self._dirty = True

    def flush(self) -> None:
        """Write what `put` recorded, if anything changed."""
        if not self._dirty:
            return
        self._dirty = False
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self._values))
        os.replace(tmp, self.path)


class Spool:
    """Messages read from the server, kept until the broker acked them.

    One append-only journal: a line per message kept and a line per message
    acked; opening it keeps only what is still pending (rewritten whole, then
    renamed). An append is one write, no file created per message. A line
    cut short by a crash is skipped when the journal is read.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "spool.jsonl"
        self._pending: dict[int, dict[str, Any]] = {}
        with contextlib.suppress(FileNotFoundError), self.path.open("rb") as journal:
            for line in journal:
                self._replay(line)
        self._next = max(self._pending, default=0) + 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(_kept(n, r) for n, r in self._pending.items()))
        os.replace(tmp, self.path)
        self._journal = self.path.open("ab", buffering=0)

    def _replay(self, line: bytes) -> None:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return  # the line a crash cut short
        if isinstance(entry, dict) and isinstance(entry.get("n"), int):
            if "record" in entry and isinstance(entry["record"], dict):
                self._pending[entry["n"]] = entry["record"]
            else:
                self._pending.pop(entry["n"], None)

    def add(self, record: dict[str, Any]) -> int:
        """Keep `record`; its number (the spool's order)."""
        number = self._next
        self._next += 1
        self._journal.write(_kept(number, record))
        return number

    def remove(self, number: int) -> None:
        if self._journal.closed:
            return  # the adapter is stopping: it stays kept, and is sent again next time
        self._journal.write(orjson.dumps({"n": number}) + b"\n")

    def pending(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """What was still kept when the spool was opened, oldest first."""
        yield from sorted(self._pending.items())

    def close(self) -> None:
        self._journal.close()


def _kept(number: int, record: dict[str, Any]) -> bytes:
    return orjson.dumps({"n": number, "record": record}) + b"\n"
