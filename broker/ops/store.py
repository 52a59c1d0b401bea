"""The `store.call` op: the library face (ledger/api/) through a running daemon, for
`ledger.api.Store.connect` and `LedgerSession(socket=...)`.

`{"op": "store.call", "args": {"call": <name>, "args": {...}}}`, answered with the
call's JSON result; the calls and their arguments are ledger/api/served.py's.
"""

from __future__ import annotations

from typing import Any

from broker.connection import Connection
from ledger.port.protocols import LedgerPort
from plumbing.ids import now_ms
from wire.frames import ArgSpec, check_args
from wire.framing import ProtocolError


class StoreOps:
    def __init__(self, ledger: LedgerPort) -> None:
        self.ledger = ledger
        self.table = {"store.call": self.store_call}

    async def store_call(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("call", str, True, 32),), req)
        inner = args.get("args", {})
        if not isinstance(inner, dict):
            raise ProtocolError("invalid", "args.args must be an object", field="args", req=req)
        try:
            return await self.ledger.library_call(a["call"], inner, now_ms())
        except TypeError as exc:  # an item the ledger cannot store
            raise ProtocolError("invalid", str(exc), field="items", req=req) from exc
