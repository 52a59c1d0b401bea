"""`LedgerSessionService`: Google ADK's `BaseSessionService` on an agent-broker ledger.

    from ledger.integrations.adk import LedgerSessionService
    service = LedgerSessionService(path="sessions.db")   # was SqliteSessionService(...)
    runner = Runner(agent=agent, app_name="app", session_service=service)
    service = LedgerSessionService(socket="/run/agent-broker/broker.sock")  # via a daemon

`append_event` never refuses a session for being behind: ADK's own services raise
`StaleSessionError` when another writer appended since the caller read the session;
here every append goes on the session's head at its commit (ledger/api/adk_rows.py),
so two concurrent appends are both kept, in commit order, and neither caller retries.
Events come back equal to what was appended: each is stored as its JSON
(`model_dump(mode="json", exclude_none=True)`, bytes as base64), as ADK's
SqliteSessionService stores it, and read back in append order.

State follows ADK's prefixes: `app:` keys are the app's, shared by all its sessions;
`user:` keys are the user's in that app; `temp:` keys are applied to the caller's
Session object and never stored; the rest are the session's own. A call that raises
stored nothing and left the caller's Session as it was: state and the event are made
JSON (the way ADK's own stores make rich values JSON) before anything is queued, and
a value that cannot be raises `TypeError` naming it.

Every call is one of the library's `adk.*` calls (ledger/api/served.py), run on the
file's own writer and a read connection of this thread (`path=`), or sent to a
running daemon that runs the same jobs and reads (`socket=`, as `Store.connect`
does). A daemon connection belongs to the event loop it was made in; another loop
makes its own.
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

from ledger.api import adk_rows, served
from ledger.api.engine import acquire
from ledger.api.errors import StoreClosed
from ledger.api.remote import RemoteStore
from ledger.api.store import Store
from ledger.api.waiting import current_loop, wait_async
from ledger.db import Synchronous
from ledger.port.errors import Conflict, NotFound
from plumbing.ids import now_ms

Deltas = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]  # app, user, session


def split_state(state: dict[str, Any] | None, what: str) -> Deltas:
    """The app, user and session parts of `state`, as JSON."""
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
    """The event as stored, without its `temp:` state."""
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
        path: str | Path | None = None,
        *,
        socket: str | Path | None = None,
        synchronous: Synchronous = "NORMAL",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (path is None) == (socket is None):
            raise ValueError(
                "give LedgerSessionService either path= (a ledger file) or socket= (a daemon)"
            )
        # Opening is blocking, as SqliteSessionService's schema check is.
        self._local = None if path is None else Store(acquire(Path(path), synchronous), now_ms)
        self._socket = None if socket is None else str(socket)
        self._remote: RemoteStore | None = None
        self._remote_loop: object = None
        self._clock = clock

    @property
    def store(self) -> Store:
        """The Store underneath (fork, compact, export of a session's events); with
        `socket=`, `await service.remote()` is its counterpart."""
        if self._local is None:
            raise StoreClosed("this service reaches a daemon: use `await service.remote()`")
        return self._local

    async def remote(self) -> RemoteStore:
        """The daemon's Store calls, on a connection of this event loop."""
        if self._socket is None:
            raise StoreClosed("the LedgerSessionService is closed, or has no daemon")
        loop = current_loop()
        if self._remote is None or self._remote_loop is not loop:
            self._remote, self._remote_loop = await RemoteStore.connect(self._socket), loop
        return self._remote

    def close(self) -> None:
        """Let go of the ledger file or the daemon's connection; the service cannot be
        used after."""
        if self._local is not None:
            self._local._close()
        if self._remote is not None:
            self._remote.close_now()
        self._socket = None

    async def _call(self, call: str, **args: Any) -> Any:
        """One `adk.*` call: its JSON answer."""
        if self._local is None:
            return await (await self.remote())._call(call, **args)
        kind, what = served.plan(call, args, now_ms())
        if kind == "write":
            value = await wait_async(what, self._local._submit)
        else:
            value = what(self._local._reads())
        return served.answer(call, value)

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
        try:
            shared = await self._call(
                "adk.create", session=adk_rows.label(app_name, user_id, sid),
                record=record, app=app_name, user=user_id, app_delta=app_delta,
                user_delta=user_delta, ts=now,
            )  # fmt: skip
        except Conflict:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        app, user = shared["app"], shared["user"]
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
        view = await self._call(
            "adk.get", app=app_name, user=user_id, session=adk_rows.label(app_name, user_id, sid),
            recent=config.num_recent_events if config else None,
            after=config.after_timestamp if config else None,
        )  # fmt: skip
        if not view:
            return None
        record = view["record"]
        return Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=merged_state(view["app"], view["user"], record["state"]),
            events=[Event.model_validate(item) for item in view["events"]],
            last_update_time=record["update_time"],
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        view = await self._call("adk.list", app=app_name, user=user_id)
        app, users = view["app"], view["users"]
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
                for r in view["records"]
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        try:
            await self._call(
                "delete", session=adk_rows.label(app_name, user_id, _session_id(session_id))
            )
        except NotFound:
            return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        state: dict[str, Any] = await self._call("adk.user_state", app=app_name, user=user_id)
        return state

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # everything that can refuse the call runs before anything changes.
        delta = event.actions.state_delta if event.actions else None
        app_delta, user_delta, own_delta = split_state(delta, "state_delta")
        try:
            text = orjson.dumps(event_json(event)).decode()
        except TypeError as exc:  # beyond what JSON holds (orjson: 64-bit integers)
            raise TypeError(f"event {event.id!r} cannot be stored: {exc}") from None
        try:
            await self._call(
                "adk.append", session=adk_rows.label(session.app_name, session.user_id, session.id),
                event=text, session_delta=own_delta, app=session.app_name, user=session.user_id,
                app_delta=app_delta, user_delta=user_delta, ts=event.timestamp,
            )  # fmt: skip
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)
