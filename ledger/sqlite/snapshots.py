"""The SQLite ledger's `SnapshotPort`: file snapshots by content, read back and
collected.

A turn's `file` events are stored with the turn itself (`submit_turn`); the size
past which content is kept by hash alone is the writer's setting, so a change
applies to every turn submitted after it, whoever submits it.
"""

from __future__ import annotations

from typing import Any

from ledger import snapshots
from ledger.sqlite.connections import Connected


class SqliteSnapshots(Connected):
    _snapshot_max_bytes = snapshots.DEFAULT_MAX_BYTES

    @property
    def snapshot_max_bytes(self) -> int:
        return self._snapshot_max_bytes

    @snapshot_max_bytes.setter
    def snapshot_max_bytes(self, max_bytes: int) -> None:
        """Applies to the turns submitted after it, whoever submits them: the
        writer (a process, say) holds the setting. Not waited for, as a reload
        must not hang on a stuck writer."""
        self._snapshot_max_bytes = max_bytes
        self.writer.submit(snapshots.configure, max_bytes)

    async def file_history(self, session: str, path: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: snapshots.history(c, session, path))

    async def file_at(self, session: str, path: str, turn: str | None) -> dict[str, Any]:
        return await self.readers.run(lambda c: snapshots.at(c, session, path, turn))

    async def file_list(self, session: str) -> list[dict[str, Any]]:
        return await self.readers.run(lambda c: snapshots.files(c, session))

    async def snapshots_gc(self) -> dict[str, int]:
        return await self.writer.call(snapshots.gc)
