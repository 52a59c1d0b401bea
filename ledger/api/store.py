"""`Store`: the ledger as a session store in this process, async (anyio: asyncio or
trio), with no daemon. `SyncStore` (sync.py) is the same for blocking code.

    store = await Store.open("sessions.db")
    await store.append("chat-1", [{"role": "user", "content": "hi"}])
    last = await store.last("chat-1", 30)
    await store.aclose()

Writes go to the file's one writer (engine.py) and return after their COMMIT: what a
call returned is on disk, through a kill -9 of the process (and, with
synchronous="FULL", a power loss). Two tasks appending to one session are serialized
by that writer: each append is one turn whose parent is the head at its commit, so
the items of one call stay together and in order. A call that raises stored nothing:
bad items raise before they are queued (face.py), and a job that fails is rolled back
alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio

import ledger.api.memory as memory
from ledger.api.engine import acquire
from ledger.api.face import Clock, Face, _job
from ledger.api.records import Page, SessionInfo, TokenCount, TurnInfo, within_tokens
from ledger.api.remote import RemoteStore
from ledger.api.waiting import wait_async
from ledger.db import Synchronous
from ledger.erasure import merge_index, truncate_wal
from ledger.port.cipher import read_key
from ledger.retention import expire_batch, expire_outbox
from plumbing.ids import now_ms

DAY_MS = 86_400_000
Summarizer = Callable[[list[Any]], Sequence[Any] | Awaitable[Sequence[Any]]]


class Store(Face):
    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        clock: Clock = now_ms,
        key_file: str | Path | None = None,
    ) -> Self:
        """Open (or create) the ledger at `path`; refused with a `LedgerError` naming the
        problem, the file untouched (opening.py). With `key_file` the ledger is
        encrypted (ledger/port/cipher.py: a bad key file is a `KeyFileError`)."""
        key = None if key_file is None else read_key(key_file)
        engine = await anyio.to_thread.run_sync(acquire, Path(path), synchronous, key)
        return cls(engine, clock)

    @classmethod
    async def memory(cls, *, clock: Clock = now_ms) -> Self:
        """A new, empty store held in RAM (memory.py): the same ledger, schema and calls
        as `open`, gone when it closes."""
        folder = memory.make_folder()
        try:
            engine = await anyio.to_thread.run_sync(acquire, folder / "ledger.db", "NORMAL", None)
        except BaseException:
            memory.remove(folder)
            raise
        return cls(engine, clock, folder)

    @staticmethod
    async def connect(socket_path: str | Path) -> RemoteStore:
        """The same calls through the running daemon serving `socket_path` (remote.py)."""
        return await RemoteStore.connect(socket_path)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- sessions ------------------------------------------------------------

    async def create(
        self,
        session_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        """A new, empty session; `Conflict` if the id is taken."""
        label, job = self._create_job(session_id, title, metadata)
        await wait_async(job, self._submit)
        return self._read_get_session(label)

    async def get(self, session_id: str) -> SessionInfo:
        return self._read_get_session(session_id)

    async def list_sessions(
        self,
        *,
        kind: str | None = None,
        title_contains: str | None = None,
        updated_after: int | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        return self._read_list_sessions(
            kind=kind,
            title_contains=title_contains,
            updated_after=updated_after,
            cursor=cursor,
            limit=limit,
        )

    async def put(
        self,
        session_id: str,
        turns: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        """Replace the session's thread by `turns` (lists of items), creating it if need be."""
        await wait_async(self._put_job(session_id, turns, title, metadata), self._submit)
        return self._read_get_session(session_id)

    async def set_title(
        self, session_id: str, title: str | None, *, metadata: dict[str, Any] | None = None
    ) -> None:
        await wait_async(self._title_job(session_id, title, metadata), self._submit)

    async def delete(self, session_id: str) -> None:
        """Remove the session and its turns; `Conflict` if a fork builds on them."""
        await wait_async(self._delete_job(session_id), self._submit)

    async def end(self, session_id: str, summary: str | None = None) -> SessionInfo:
        """Close the session: its later writes raise `SessionEnded`. `summary` is its
        closing summary, else one made of its turns' titles."""
        await wait_async(self._end_job(session_id, summary), self._submit)
        return self._read_get_session(session_id)

    async def expire(self, keep_days: float) -> int:
        """Turn the turns that ended more than `keep_days` ago into stubs, but those a
        session goes on from (ledger/retention.py); how many. Their text leaves the
        file's bytes too: the index is merged and the WAL truncated after."""
        cutoff = self._clock() - int(keep_days * DAY_MS)
        expired, after = 0, None
        while True:
            job = _job(expire_batch, cutoff, after, self._clock())
            count, after = await wait_async(job, self._submit)
            expired += count
            if after is None:
                break
        if expired:
            out = None
            while True:
                out = await wait_async(_job(expire_outbox, out), self._submit)
                if out is None:
                    break
            left = -1
            while left != 0:
                left = await wait_async(_job(merge_index, left), self._submit)
            await anyio.to_thread.run_sync(truncate_wal, Path(self.path), self._live().cipher_key)
        return int(expired)

    # -- items and turns -----------------------------------------------------

    async def append(
        self,
        session_id: str,
        items: Sequence[Any],
        *,
        create: bool = True,
        usage: tuple[int | None, int | None] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """One turn holding `items` (JSON values); the turn's id. `usage` is (prompt
        tokens, completion tokens), `metadata` the turn's own (a JSON object, returned
        by `turns`). A missing session is created unless `create=False`."""
        return str(
            await wait_async(
                self._append_job(session_id, items, create, usage, metadata),
                self._live().submit,
            )
        )

    async def last(self, session_id: str, n: int) -> list[Any]:
        """The last `n` items, oldest first."""
        return self._read_last(session_id, n)

    async def recent(
        self,
        session_id: str,
        n: int = 30,
        *,
        max_tokens: int | None = None,
        count: TokenCount | None = None,
    ) -> list[Any]:
        """The last `n` items, oldest first, less the older ones past `max_tokens`
        (counted by `count`, else estimated: records.estimate_tokens)."""
        return within_tokens(self._read_last(session_id, n), max_tokens, count)

    async def items(self, session_id: str, start: int = 0, stop: int | None = None) -> list[Any]:
        """The thread's items `[start:stop]` (Python slice rules), oldest first."""
        return self._read_items(session_id, start, stop)

    async def turns(self, session_id: str) -> list[TurnInfo]:
        return self._read_turns(session_id)

    async def pop(self, session_id: str) -> Any:
        """Take the last item off the thread and return it; None if there is none."""
        from ledger.api.records import decode_item

        popped = await wait_async(self._pop_job(session_id), self._submit)
        return None if popped is None else decode_item(*popped)

    async def clear(self, session_id: str) -> None:
        """Start the session afresh; its old turns stay in the ledger, off the thread."""
        await wait_async(self._clear_job(session_id), self._submit)

    async def fork(self, turn_id: str, new_id: str | None = None) -> SessionInfo:
        """A new session whose thread ends at `turn_id` (constant time)."""
        label = await wait_async(self._fork_job(turn_id, new_id), self._submit)
        return self._read_get_session(str(label))

    async def compact(self, session_id: str, summarizer: Summarizer) -> str:
        """Replace what the thread reads as by `summarizer(items)`, as a compaction turn
        (the old turns stay); `Conflict` if the session moved on meanwhile."""
        head, items, spanned = self._compact_plan(session_id)
        summary = summarizer(items)
        if inspect.isawaitable(summary):
            summary = await summary
        job = self._compact_job(session_id, head, list(summary), spanned)
        return str(await wait_async(job, self._submit))

    async def export_jsonl(self, session_id: str) -> bytes:
        return self._read_export_jsonl(session_id)

    async def import_jsonl(
        self, data: bytes | str | Iterable[bytes | str], new_id: str | None = None
    ) -> SessionInfo:
        label, _ = await wait_async(self._import_job(data, new_id), self._submit)
        return self._read_get_session(str(label))
