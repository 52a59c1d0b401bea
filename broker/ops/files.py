"""Operator ops for file snapshots (`file.*`, `snapshots.gc`), one function per op (ops.py)."""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from core.snapshots import MAX_PATH_BYTES, path_problem
from ledger.port.protocols import LedgerPort
from plumbing import logs
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError

log = logs.get("broker.ops")


class FileOps:
    """`file.history`, `file.at`, `file.list` and `snapshots.gc` (ledger/snapshots.py)."""

    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {
            "file.history": self.file_history,
            "file.at": self.file_at,
            "file.list": self.file_list,
            "snapshots.gc": self.snapshots_gc,
        }

    def _path(self, a: dict[str, Any], req: str | None) -> str:
        problem = path_problem(a["path"])
        if problem is not None:
            raise ProtocolError("invalid", problem, field="path", req=req)
        return str(a["path"])

    async def file_history(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("session", str, True), ArgSpec("path", str, True, MAX_PATH_BYTES)), req
        )
        return await self.ledger.file_history(a["session"], self._path(a, req))

    async def file_at(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        """The file after a turn; `content` when it is UTF-8 text, else `content_b64`."""
        a = check_args(
            args,
            (
                ArgSpec("session", str, True),
                ArgSpec("path", str, True, MAX_PATH_BYTES),
                ArgSpec("turn", str, False, 64),
            ),
            req,
        )
        return await self.ledger.file_at(a["session"], self._path(a, req), a.get("turn"))

    async def file_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True),), req)
        return await self.ledger.file_list(a["session"])

    async def snapshots_gc(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        removed = await self.ledger.snapshots_gc()
        log.info("snapshot blobs collected", **removed)
        return removed
