"""The ledger's write side assembled, the same for the writer process and the
writer thread: the one write connection with its identity caches, the
full-text index brought up to date before each COMMIT (fts.py), and the WAL
checkpointer beside it (checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

from .checkpoint import WalCheckpointer
from .db import Synchronous, connect
from .fts import indexer_for
from .ingest import WriterConnection
from .writer import Transactor


def open_transactor(path: Path | str, synchronous: Synchronous) -> Transactor:
    """Open the writer's connection and what goes with it (blocking)."""
    conn = connect(path, synchronous, factory=WriterConnection)
    assert isinstance(conn, WriterConnection)
    checkpointer: WalCheckpointer | None = None
    try:
        checkpointer = WalCheckpointer(path)
        return Transactor(conn, conn.identity.clear, indexer_for(conn), checkpointer)
    except BaseException:
        if checkpointer is not None:
            checkpointer.stop()
        conn.close()
        raise
