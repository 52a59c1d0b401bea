"""What the async Store and the blocking SyncStore share: the jobs they hand the
writer, and the reads they run on the caller's thread (engine.py).

Everything a call needs from the caller (its items encoded, its time) is settled
before the job is queued, so a call that cannot be stored raises at once and queues
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

import ledger.api.memory as memory
import ledger.api.reads as reads
import ledger.api.writes as writes
from ledger import sessions as ledger_sessions
from ledger.api.engine import Engine, release
from ledger.api.errors import StoreClosed
from ledger.api.records import Page, SessionInfo, TurnInfo, encode_items, encode_metadata
from ledger.sessions import export_snapshot, import_lines
from ledger.writer.jobs import JobSpec

Clock = Callable[[], int]
_NO_USAGE = (None, None)


def _job(fn: Callable[..., Any], *args: Any) -> JobSpec:
    return JobSpec(fn, args, {})


def _label(session_id: str) -> str:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"a session id is a non-empty string, not {session_id!r}")
    return session_id


class Face:
    def __init__(self, engine: Engine, clock: Clock, scratch: Path | None = None) -> None:
        self._engine: Engine | None = engine
        self._clock = clock
        self._scratch = scratch  # a memory store's folder (memory.py), removed at close

    @property
    def path(self) -> str:
        return str(self._live().path)

    def _live(self) -> Engine:
        if self._engine is None:
            raise StoreClosed("the Store is closed; open it again to go on")
        return self._engine

    def _submit(self, ticket: Any) -> None:
        self._live().submit(ticket)

    def _close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            release(engine)
        if self._scratch is not None:
            memory.remove(self._scratch)
            self._scratch = None

    def _reads(self) -> Any:
        return self._live().readers.conn()

    # -- jobs -------------------------------------------------------

    def _create_job(
        self, session_id: str | None, title: str | None, metadata: dict[str, Any] | None
    ) -> tuple[str, JobSpec]:
        from plumbing.ids import new_id

        label = _label(session_id) if session_id is not None else f"lib:{new_id()}"
        return label, _job(
            writes.create_session, label, title, encode_metadata(metadata), self._clock()
        )

    def _append_job(
        self,
        session_id: str,
        items: Sequence[Any],
        create: bool,
        usage: tuple[int | None, int | None] | None,
        metadata: dict[str, Any] | None = None,
    ) -> JobSpec:
        rows = encode_items(items)
        args: tuple[Any, ...] = (_label(session_id), rows, self._clock(), create)
        args += (usage or _NO_USAGE,)
        if metadata is not None:
            args += (encode_metadata(metadata),)
        return JobSpec(writes.append_turn, args, {})

    def _put_job(
        self,
        session_id: str,
        turns: Sequence[Sequence[Any]],
        title: str | None,
        metadata: dict[str, Any] | None,
    ) -> JobSpec:
        rows = [encode_items(t) for t in turns]
        return _job(
            writes.put, _label(session_id), rows, title, encode_metadata(metadata), self._clock()
        )

    def _title_job(
        self, session_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> JobSpec:
        return _job(
            writes.set_title, _label(session_id), title, encode_metadata(metadata), self._clock()
        )

    def _end_job(self, session_id: str, summary: str | None) -> JobSpec:
        return _job(writes.end_session, _label(session_id), summary, self._clock())

    def _pop_job(self, session_id: str) -> JobSpec:
        return _job(writes.pop_item, _label(session_id), self._clock())

    def _clear_job(self, session_id: str) -> JobSpec:
        return _job(writes.clear, _label(session_id), self._clock())

    def _delete_job(self, session_id: str) -> JobSpec:
        return _job(writes.delete, _label(session_id))

    def _fork_job(self, turn_id: str, new_id: str | None) -> JobSpec:
        return _job(ledger_sessions.fork, turn_id, new_id, self._clock())

    def _compact_plan(self, session_id: str) -> tuple[str | None, list[Any], int]:
        """The head, the items a summarizer gets and how many turns they span."""
        head, turns = reads.thread(self._reads(), _label(session_id))
        return head, [i for t in turns for i in t.items], len(turns)

    def _compact_job(
        self, session_id: str, head: str | None, summary: Sequence[Any], spanned: int
    ) -> JobSpec:
        rows = encode_items(summary)
        return _job(writes.compact, _label(session_id), head, rows, spanned, self._clock())

    def _import_job(self, data: bytes | str | Iterable[bytes | str], new_id: str | None) -> JobSpec:
        if isinstance(data, (bytes, str)):
            raw = data.encode() if isinstance(data, str) else data
            lines: list[bytes | str] = [ln for ln in raw.split(b"\n") if ln.strip()]
        else:
            lines = [ln for ln in data if ln.strip()]
        return _job(import_lines, lines, new_id, self._clock())

    # -- reads (on the caller's thread) --------------------------------------

    def _read_get_session(self, session_id: str) -> SessionInfo:
        return reads.get(self._reads(), _label(session_id))

    def _read_list_sessions(
        self,
        *,
        kind: str | None = None,
        title_contains: str | None = None,
        updated_after: int | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        return reads.list_sessions(
            self._reads(),
            kind=kind,
            title_contains=title_contains,
            updated_after=updated_after,
            cursor=cursor,
            limit=limit,
        )

    def _read_last(self, session_id: str, n: int) -> list[Any]:
        return reads.last_items(self._reads(), _label(session_id), n)

    def _read_items(self, session_id: str, start: int = 0, stop: int | None = None) -> list[Any]:
        return reads.items(self._reads(), _label(session_id))[start:stop]

    def _read_turns(self, session_id: str) -> list[TurnInfo]:
        return reads.turns(self._reads(), _label(session_id))

    def _read_export_jsonl(self, session_id: str) -> bytes:
        """The session's thread as JSON lines (the format of `brokerctl export`)."""
        lines = export_snapshot(self._reads(), _label(session_id), self._clock())
        return b"".join(orjson.dumps(line) + b"\n" for line in lines)
