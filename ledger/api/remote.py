"""`RemoteStore`: the Store's calls through a running daemon's socket, as an operator
(the `store.call` op, broker/ops/store.py; ledger/api/served.py runs them), over the
wire protocol's one client (`wire.client.BrokerClient`), as adapters and brokerctl.

Items are encoded here first (records.py), so an item that is not JSON-serializable
raises `TypeError` before anything is sent. One request at a time goes on the
connection (a lock), each answered before the next; the daemon's writer still
commits the requests of many connections together. An `error` answer raises the
ledger's own exception: `not_found` as `NotFound`, `invalid` as `Conflict`, both with
the field the daemon named; anything else as `LedgerError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio

from ledger.api.errors import DaemonUnreachable, SessionEnded
from ledger.api.records import (
    Page,
    SessionInfo,
    TokenCount,
    TurnInfo,
    encode_items,
    encode_metadata,
    within_tokens,
)
from ledger.port.errors import Conflict, LedgerError, NotFound
from plumbing.ids import new_id
from wire.client import BrokerClient, BrokerError


class RemoteStore:
    def __init__(self, client: BrokerClient, socket_path: str) -> None:
        self.client = client  # the wire protocol's one client (wire/client.py)
        self._lock = anyio.Lock()
        self.socket_path = socket_path

    @classmethod
    async def connect(cls, socket_path: str | Path) -> Self:
        try:
            client = await BrokerClient.connect(socket_path)
        except OSError as exc:
            raise DaemonUnreachable(
                f"no daemon answers on the socket {socket_path}: {exc.strerror or exc}"
                " (is the daemon running, and is this its socket?)"
            ) from exc
        except BrokerError as exc:
            raise LedgerError(f"the daemon on {socket_path} refused us: {exc.frame}") from exc
        return cls(client, str(socket_path))

    async def aclose(self) -> None:
        await self.client.aclose()

    def close_now(self) -> None:
        """Close the connection from blocking code (its event loop may be gone)."""
        self.client.close_now()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _op(self, op: str, args: dict[str, Any]) -> Any:
        async with self._lock:  # one request at a time
            try:
                return await self.client.op(op, **args)
            except BrokerError as exc:
                field, message = exc.field, str(exc.frame.get("message"))
                if exc.code == "not_found":
                    raise NotFound(message, field=field) from None
                if exc.code == "invalid":
                    raise Conflict(message, field=field) from None
                if exc.code == "conflict":  # the one library call answering it
                    raise SessionEnded(message, field=field) from None
                raise LedgerError(f"{exc.code}: {message}") from None

    async def _call(self, call: str, **args: Any) -> Any:
        return await self._op("store.call", {"call": call, "args": args})

    # -- the Store's calls (store.py) ----------------------------------------

    async def create(
        self,
        session_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        label = session_id or f"lib:{new_id()}"
        await self._call("create", session=label, title=title, metadata=metadata)
        return await self.get(label)

    async def get(self, session_id: str) -> SessionInfo:
        return SessionInfo(**await self._call("get", session=session_id))

    async def list_sessions(self, **filters: Any) -> Page:
        got = await self._call("list", **filters)
        return Page([SessionInfo(**s) for s in got["sessions"]], got["next_cursor"])

    async def put(
        self,
        session_id: str,
        turns: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        for turn in turns:
            encode_items(turn)  # raises before anything is sent
        await self._call(
            "put",
            session=session_id,
            turns=[list(t) for t in turns],
            title=title,
            metadata=metadata,
        )
        return await self.get(session_id)

    async def set_title(
        self, session_id: str, title: str | None, *, metadata: dict[str, Any] | None = None
    ) -> None:
        await self._call("set_title", session=session_id, title=title, metadata=metadata)

    async def end(self, session_id: str, summary: str | None = None) -> SessionInfo:
        """Close the session: its later writes raise `SessionEnded` (store.py)."""
        await self._call("end", session=session_id, summary=summary)
        return await self.get(session_id)

    async def delete(self, session_id: str) -> None:
        await self._call("delete", session=session_id)

    async def append(
        self,
        session_id: str,
        items: Sequence[Any],
        *,
        create: bool = True,
        usage: tuple[int | None, int | None] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        encode_items(items)  # raises before anything is sent
        encode_metadata(metadata)
        got = await self._call(
            "append",
            session=session_id,
            items=list(items),
            create=create,
            usage=None if usage is None else list(usage),
            metadata=metadata,
        )
        return str(got["turn"])

    async def last(self, session_id: str, n: int) -> list[Any]:
        return list(await self._call("last", session=session_id, n=n))

    async def recent(
        self,
        session_id: str,
        n: int = 30,
        *,
        max_tokens: int | None = None,
        count: TokenCount | None = None,
    ) -> list[Any]:
        """`Store.recent`: the last `n` items within `max_tokens`."""
        return within_tokens(await self.last(session_id, n), max_tokens, count)

    async def items(self, session_id: str, start: int = 0, stop: int | None = None) -> list[Any]:
        return list(await self._call("items", session=session_id))[start:stop]

    async def turns(self, session_id: str) -> list[TurnInfo]:
        return [TurnInfo(**t) for t in await self._call("turns", session=session_id)]

    async def pop(self, session_id: str) -> Any:
        return (await self._call("pop", session=session_id))["item"]

    async def clear(self, session_id: str) -> None:
        await self._call("clear", session=session_id)

    async def fork(self, turn_id: str, new_id: str | None = None) -> SessionInfo:
        args: dict[str, Any] = {"turn": turn_id}
        if new_id is not None:
            args["label"] = new_id
        made = await self._op("session.fork", args)
        return await self.get(str(made["label"]))

    async def compact(self, session_id: str, summarizer: Callable[[list[Any]], Any]) -> str:
        thread = await self._call("thread", session=session_id)
        head, turns = thread["head"], [TurnInfo(**t) for t in thread["turns"]]
        summary = summarizer([i for t in turns for i in t.items])
        if inspect.isawaitable(summary):
            summary = await summary
        encode_items(summary)
        got = await self._call(
            "compact", session=session_id, head=head, summary=list(summary), turns=len(turns)
        )
        return str(got["turn"])

    async def export_jsonl(self, session_id: str) -> bytes:
        lines = await self._call("export", session=session_id)
        return b"".join(line.encode() + b"\n" for line in lines)

    async def import_jsonl(
        self, data: bytes | str | Iterable[bytes | str], new_id: str | None = None
    ) -> SessionInfo:
        if isinstance(data, (bytes, str)):
            text = data.decode() if isinstance(data, bytes) else data
            lines = [ln for ln in text.split("\n") if ln.strip()]
        else:
            lines = [ln.decode() if isinstance(ln, bytes) else ln for ln in data]
        got = await self._call("import", lines=lines, new_id=new_id)
        return await self.get(str(got["session"]))
