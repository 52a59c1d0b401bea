"""`LedgerSessionService`: Google ADK's `BaseSessionService` on an agent-broker ledger.

    from ledger.integrations.adk import LedgerSessionService
    service = LedgerSessionService(path="sessions.db")   # was SqliteSessionService(...)
    runner = Runner(agent=agent, app_name="app", session_service=service)

Rule 1: `append_event` never refuses a session for being behind: ADK's own
        services raise `StaleSessionError` when another writer appended since
        the caller read the session; here every append goes on the session's
        head at its commit (storage.py Rule 2), so two concurrent appends are
        both kept, in commit order, and neither caller has to retry.
Rule 2: state follows ADK's prefixes: `app:` keys are the app's, shared by all
        its sessions; `user:` keys are the user's in that app; `temp:` keys are
        applied to the caller's Session object and never stored; the rest are
        the session's own.
Rule 3: a call that raises stored nothing and left the caller's Session as it
        was: state and the event are made JSON before anything is queued, a
        value that cannot be raises `TypeError` naming it. Rich values (dates,
        pydantic models) become JSON the way ADK's own stores make them.
Rule 4: events come back equal to what was appended: each is stored as its
        JSON (`model_dump(mode="json", exclude_none=True)`, bytes as base64),
        as ADK's SqliteSessionService stores it, and read back in append order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ...api import reads
from ...api.engine import acquire
from ...api.records import encode_items
from ...api.store import Store
from ...api.waiting import wait_async
from ...db import Synchronous
from ...errors import Conflict, NotFound
from ...ids import now_ms
from ...jobs import JobSpec
from . import storage

Deltas = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]  # app, user, session


def split_state(state: dict[str, Any] | None, what: str) -> Deltas:
    """The app, user and session parts of `state`, as JSON (Rules 2, 3)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"{what} key {key!r} is not a string; nothing was stored")
        if key.startswith(State.TEMP_PREFIX):
            continue
        try:
            json_value = to_jsonable_python(value)
            orjson.dumps(json_value)  # what pydantic lets through that JSON cannot hold
        except (PydanticSerializationError, TypeError) as exc:
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise TypeError(
                f"{what} {key!r} ({type(value).__name__}: {shown}) is not JSON-serializable:"
                f" {exc}; nothing was stored"
            ) from None
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = json_value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = json_value
        else:
            own[key] = json_value
    return app, user, own


def merged_state(app: dict[str, Any], user: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    state = dict(own)
    state.update({State.APP_PREFIX + k: v for k, v in app.items()})
    state.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return state


def event_json(event: Event) -> dict[str, Any]:
    """The event as stored (Rule 4), without its `temp:` state (Rule 2)."""
    try:
        data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
    except PydanticSerializationError as exc:
        raise TypeError(
            f"event {event.id!r} (author {event.author!r}) is not JSON-serializable: {exc};"
            " nothing was stored"
        ) from None
    delta = data.get("actions", {}).get("state_delta")
    if delta:
        data["actions"]["state_delta"] = {
            k: v for k, v in delta.items() if not k.startswith(State.TEMP_PREFIX)
        }
    return data


def _session_id(session_id: str) -> str:
    # ADK's own services read a padded id as its stripped form.
    return session_id.strip()


class LedgerSessionService(BaseSessionService):
    """ADK sessions, their events and their state in the ledger file at `path`."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Opening is blocking, as SqliteSessionService's schema check is.
        self._store = Store(acquire(Path(path), synchronous), now_ms)
        self._clock = clock

    @property
    def store(self) -> Store:
        """The Store underneath (fork, compact, export of a session's events)."""
        return self._store

    def close(self) -> None:
        """Let go of the ledger file; the service cannot be used after."""
        self._store._close()

    async def _write(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await wait_async(JobSpec(fn, args, {}), self._store._submit)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = _session_id(session_id) if session_id else ""
        sid = sid or str(uuid.uuid4())
        app_delta, user_delta, own = split_state(state, "state")
        now = self._clock()
        record = {
            "app": app_name,
            "user": user_id,
            "id": sid,
            "state": own,
            "create_time": now,
            "update_time": now,
        }
        metadata = orjson.dumps({"adk": record}).decode()
        label = storage.label(app_name, user_id, sid)
        try:
            app, user = await self._write(
                storage.create, label, metadata, app_name, user_id, app_delta, user_delta,
                now, now_ms(),
            )  # fmt: skip
        except Conflict:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        return Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=merged_state(app, user, own),
            events=[],
            last_update_time=now,
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        sid = _session_id(session_id)
        label = storage.label(app_name, user_id, sid)
        with storage.snapshot(self._store._reads()) as conn:
            try:
                info = reads.get(conn, label)
            except NotFound:
                return None
            record = info.metadata.get("adk")
            if not isinstance(record, dict):
                return None
            items = _event_items(conn, label, config)
            app = storage.shared_state(conn, app_name, storage.APP, "")
            user = storage.shared_state(conn, app_name, storage.USER, user_id)
        return Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=merged_state(app, user, record["state"]),
            events=[Event.model_validate(item) for item in items],
            last_update_time=record["update_time"],
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        with storage.snapshot(self._store._reads()) as conn:
            records = storage.session_records(conn, app_name, user_id)
            app = storage.shared_state(conn, app_name, storage.APP, "")
            users = storage.user_states(conn, app_name)
        return ListSessionsResponse(
            sessions=[
                Session(
                    app_name=app_name,
                    user_id=r["user"],
                    id=r["id"],
                    state=merged_state(app, users.get(r["user"], {}), r["state"]),
                    events=[],
                    last_update_time=r["update_time"],
                )
                for r in records
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        try:
            await self._store.delete(storage.label(app_name, user_id, _session_id(session_id)))
        except NotFound:
            return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return storage.shared_state(self._store._reads(), app_name, storage.USER, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # Rule 3: everything that can refuse the call runs before anything changes.
        delta = event.actions.state_delta if event.actions else None
        app_delta, user_delta, own_delta = split_state(delta, "state_delta")
        try:
            (row,) = encode_items([event_json(event)])
        except TypeError as exc:  # beyond what JSON holds (orjson: 64-bit integers)
            raise TypeError(f"event {event.id!r} cannot be stored: {exc}") from None
        try:
            await self._write(
                storage.append, storage.label(session.app_name, session.user_id, session.id),
                row, own_delta, session.app_name, session.user_id, app_delta, user_delta,
                event.timestamp, now_ms(),
            )  # fmt: skip
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)


def _event_items(conn: Any, label: str, config: GetSessionConfig | None) -> list[Any]:
    """The stored events `config` asks for, oldest first: those at or after
    `after_timestamp`, the last `num_recent_events` of them."""
    recent = config.num_recent_events if config else None
    after = config.after_timestamp if config else None
    if recent == 0:
        return []
    if after is None:
        return reads.items(conn, label) if recent is None else reads.last_items(conn, label, recent)
    items = [i for i in reads.items(conn, label) if i.get("timestamp", 0) >= after]
    return items if recent is None else items[-recent:]
