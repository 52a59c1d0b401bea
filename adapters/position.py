"""What an adapter keeps on disk between runs: its confirmed position and its spool.

Rule 1: a position is stored only after the broker acked every message up to
        it. A stale position costs duplicates, never a loss: the broker
        dedups by (channel, msg_id) and answers `duplicate`. So a position
        file is replaced atomically (write, rename) but not fsynced.
Rule 2: a spooled message stays on disk from the moment it was read from the
        server until the broker acked it; on start the spool is sent again,
        in order. It is for servers that keep no history (IRC): a kill -9
        between the server's message and the ack loses nothing. The spool
        survives a crash of the process, not of the machine (no fsync: a
        message read from a socket was never durable anyway).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


class PositionStore:
    """Small named positions (a MAM archive id, a sync token), one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._values: dict[str, Any] = {}
        with contextlib.suppress(FileNotFoundError):
            loaded = orjson.loads(path.read_bytes())
            if isinstance(loaded, dict):
                self._values = loaded

    def get(self, key: str) -> Any:
        return self._values.get(key)

    def put(self, key: str, value: Any) -> None:
        """Store `value` under `key` (Rule 1: call it after the broker's ack)."""
        if self._values.get(key) == value:
            return
        self._values[key] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self._values))
        os.replace(tmp, self.path)


class Spool:
    """Messages read from the server, kept until the broker acked them (Rule 2)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        numbers = [int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()]
        self._next = max(numbers, default=0) + 1

    def add(self, record: dict[str, Any]) -> int:
        """Keep `record`; its number (the spool's order)."""
        number = self._next
        self._next += 1
        tmp = self.directory / f"{number:012d}.tmp"
        tmp.write_bytes(orjson.dumps(record))
        os.replace(tmp, self.directory / f"{number:012d}.json")
        return number

    def remove(self, number: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{number:012d}.json").unlink()

    def pending(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """What is kept, oldest first; unreadable records are skipped (and removed)."""
        for path in sorted(self.directory.glob("*.json")):
            try:
                record = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                path.unlink(missing_ok=True)
                continue
            if isinstance(record, dict):
                yield int(path.stem), record
