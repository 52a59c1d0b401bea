"""The SQLite ledger's `EmbeddingPort`: recall by meaning's vectors
(ledger/recall/vectors.py), read on a reader and stored in one short writer job."""

from __future__ import annotations

from ledger.recall import vectors
from ledger.sqlite.connections import Connected


class SqliteEmbeddings(Connected):
    async def embeddings_pending(self, limit: int) -> tuple[int, int, list[tuple[int, str, str]]]:
        return await self.readers.run(lambda c: vectors.pending(c, limit))

    async def embeddings_store(self, through: int, rows: list[tuple[int, str, str, bytes]]) -> int:
        return await self.writer.call(vectors.store, through, rows)

    async def embeddings_counts(self) -> tuple[int, int]:
        return await self.readers.run(vectors.counts)
