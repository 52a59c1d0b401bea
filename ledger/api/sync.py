"""`SyncStore`: the Store for blocking code (each call blocks its thread until the
commit). It shares the file's engine with any async Store of the process."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import ledger.api.memory as memory
from ledger.api.engine import acquire
from ledger.api.face import Clock, Face
from ledger.api.records import (
    Page,
    SessionInfo,
    TokenCount,
    TurnInfo,
    decode_item,
    within_tokens,
)
from ledger.api.waiting import wait_blocking
from ledger.db import Synchronous
from plumbing.ids import now_ms


class SyncStore(Face):
    @classmethod
    def open(
        cls, path: str | Path, *, synchronous: Synchronous = "NORMAL", clock: Clock = now_ms
    ) -> Self:
        return cls(acquire(Path(path), synchronous), clock)

    @classmethod
    def memory(cls, *, clock: Clock = now_ms) -> Self:
        """A new, empty store held in RAM, gone when it closes (`Store.memory`)."""
        folder = memory.make_folder()
        try:
            return cls(acquire(folder / "ledger.db", "NORMAL"), clock, folder)
        except BaseException:
            memory.remove(folder)
            raise

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create(
        self,
        session_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        label, job = self._create_job(session_id, title, metadata)
        wait_blocking(job, self._submit)
        return self._read_get_session(label)

    def get(self, session_id: str) -> SessionInfo:
        return self._read_get_session(session_id)

    def list_sessions(self, **filters: Any) -> Page:
        return self._read_list_sessions(**filters)

    def put(
        self,
        session_id: str,
        turns: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionInfo:
        wait_blocking(self._put_job(session_id, turns, title, metadata), self._submit)
        return self._read_get_session(session_id)

    def set_title(
        self, session_id: str, title: str | None, *, metadata: dict[str, Any] | None = None
    ) -> None:
        wait_blocking(self._title_job(session_id, title, metadata), self._submit)

    def end(self, session_id: str, summary: str | None = None) -> SessionInfo:
        """Close the session: its later writes raise `SessionEnded` (store.py)."""
        wait_blocking(self._end_job(session_id, summary), self._submit)
        return self._read_get_session(session_id)

    def delete(self, session_id: str) -> None:
        wait_blocking(self._delete_job(session_id), self._submit)

    def append(
        self,
        session_id: str,
        items: Sequence[Any],
        *,
        create: bool = True,
        usage: tuple[int | None, int | None] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        job = self._append_job(session_id, items, create, usage, metadata)
        return str(wait_blocking(job, self._submit))

    def last(self, session_id: str, n: int) -> list[Any]:
        return self._read_last(session_id, n)

    def recent(
        self,
        session_id: str,
        n: int = 30,
        *,
        max_tokens: int | None = None,
        count: TokenCount | None = None,
    ) -> list[Any]:
        """`Store.recent`: the last `n` items within `max_tokens`."""
        return within_tokens(self._read_last(session_id, n), max_tokens, count)

    def items(self, session_id: str, start: int = 0, stop: int | None = None) -> list[Any]:
        return self._read_items(session_id, start, stop)

    def turns(self, session_id: str) -> list[TurnInfo]:
        return self._read_turns(session_id)

    def pop(self, session_id: str) -> Any:
        popped = wait_blocking(self._pop_job(session_id), self._submit)
        return None if popped is None else decode_item(*popped)

    def clear(self, session_id: str) -> None:
        wait_blocking(self._clear_job(session_id), self._submit)

    def fork(self, turn_id: str, new_id: str | None = None) -> SessionInfo:
        label = wait_blocking(self._fork_job(turn_id, new_id), self._submit)
        return self._read_get_session(str(label))

    def compact(self, session_id: str, summarizer: Callable[[list[Any]], Sequence[Any]]) -> str:
        head, items, spanned = self._compact_plan(session_id)
        job = self._compact_job(session_id, head, list(summarizer(items)), spanned)
        return str(wait_blocking(job, self._submit))

    def export_jsonl(self, session_id: str) -> bytes:
        return self._read_export_jsonl(session_id)

    def import_jsonl(
        self, data: bytes | str | Iterable[bytes | str], new_id: str | None = None
    ) -> SessionInfo:
        label, _ = wait_blocking(self._import_job(data, new_id), self._submit)
        return self._read_get_session(str(label))
