"""`LedgerSession` and `LedgerSessionService` against the frameworks' own stores,
call for call: random sequences of the OpenAI Agents SDK's `Session` calls run on
a `LedgerSession` and on the SDK's `SQLiteSession`, and of ADK's session-service
calls on a `LedgerSessionService` and on ADK's `InMemorySessionService`; every
answer must be the same. (tests/library/test_store_model.py does this for the
Store, against a plain model.)

What the reference answers and ours do not, on purpose, is left out of the
draws and named here: ADK services order events by timestamp or by append
(the draws' timestamps only grow), a negative `num_recent_events` (ADK's own
services disagree), and update times set by the clock of each (only the
update time an event sets is compared).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

pytest.importorskip("agents")
pytest.importorskip("google.adk")

from agents import SQLiteSession
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from ledger.integrations.adk import LedgerSessionService
from ledger.integrations.openai_agents import LedgerSession

TEXT = st.text(max_size=6)
LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=5,
)
SDK_ITEM = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": TEXT | JSON},
    optional={"type": st.sampled_from(["message", "function_call_output"]), "extra": JSON},
)
SETTINGS = settings(
    max_examples=int(os.environ.get("STORE_MODEL_EXAMPLES", "30")),
    stateful_step_count=int(os.environ.get("STORE_MODEL_STEPS", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def same(got: Any, want: Any) -> bool:
    return orjson.dumps(got) == orjson.dumps(want)


class Portal:
    """An asyncio loop on its own thread, its coroutines called blocking."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._stack.close()


# -- the OpenAI Agents SDK: LedgerSession against SQLiteSession ----------------


SDK_IDS = ["chat", "other ü"]


class SdkSessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="sdk-model-"))
        self.run = Portal()
        self.ours = {sid: LedgerSession(sid, path=self.folder / "ledger.db") for sid in SDK_IDS}
        self.theirs = {sid: SQLiteSession(sid, self.folder / "sdk.db") for sid in SDK_IDS}

    def teardown(self) -> None:
        for session in self.ours.values():
            session.close()
        for reference in self.theirs.values():
            reference.close()
        self.run.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def both(self, sid: str, call: str, *args: Any) -> tuple[Any, Any]:
        return (
            self.run(getattr(self.ours[sid], call), *args),
            self.run(getattr(self.theirs[sid], call), *args),
        )

    @rule(sid=st.sampled_from(SDK_IDS), items=st.lists(SDK_ITEM, max_size=3))
    def add_items(self, sid: str, items: list[Any]) -> None:
        self.both(sid, "add_items", items)

    @rule(sid=st.sampled_from(SDK_IDS), limit=st.none() | st.integers(-2, 6))
    def get_items(self, sid: str, limit: int | None) -> None:
        ours, theirs = self.both(sid, "get_items", limit)
        assert same(ours, theirs), (limit, ours, theirs)

    @rule(sid=st.sampled_from(SDK_IDS))
    def pop_item(self, sid: str) -> None:
        ours, theirs = self.both(sid, "pop_item")
        assert same(ours, theirs)

    @rule(sid=st.sampled_from(SDK_IDS))
    def clear_session(self, sid: str) -> None:
        self.both(sid, "clear_session")

    @rule(sid=st.sampled_from(SDK_IDS))
    def reopen(self, sid: str) -> None:
        self.ours[sid].close()
        self.ours[sid] = LedgerSession(sid, path=self.folder / "ledger.db")

    @invariant()
    def every_session_holds_the_same_items(self) -> None:
        for sid in SDK_IDS:
            ours, theirs = self.both(sid, "get_items")
            assert same(ours, theirs), sid


TestLedgerSessionAgainstSQLiteSession = SdkSessionMachine.TestCase
TestLedgerSessionAgainstSQLiteSession.settings = SETTINGS


# -- Google ADK: LedgerSessionService against InMemorySessionService -----------

APP = "app"
USERS = ["ada", "b:o%2F b"]  # the label quotes each part (adk_rows.py)
SIDS = ["s1", "s 2", " s1 "]  # ADK reads a padded id as its stripped form
STATE_KEYS = ["k", "n", "app:k", "app:n", "user:k", "user:n", "temp:k"]
STATE = st.dictionaries(st.sampled_from(STATE_KEYS), JSON, max_size=3)


def event_dump(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


class AdkServiceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="adk-model-"))
        self.run = Portal()
        self.ours = LedgerSessionService(path=self.folder / "ledger.db")
        self.theirs = InMemorySessionService()
        self.now = 1_000.0

    def teardown(self) -> None:
        self.ours.close()
        self.run.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def both(self, call: str, **kwargs: Any) -> tuple[Any, Any]:
        return (
            self.run(getattr(self.ours, call), **kwargs),
            self.run(getattr(self.theirs, call), **kwargs),
        )

    def check_session(self, ours: AdkSession | None, theirs: AdkSession | None) -> None:
        assert (ours is None) == (theirs is None), (ours, theirs)
        if ours is None or theirs is None:
            return
        assert (ours.app_name, ours.user_id, ours.id) == (
            theirs.app_name,
            theirs.user_id,
            theirs.id,
        )
        assert same(ours.state, theirs.state), (ours.state, theirs.state)
        assert same([event_dump(e) for e in ours.events], [event_dump(e) for e in theirs.events])
        if theirs.events:
            assert ours.last_update_time == theirs.last_update_time

    @rule(user=st.sampled_from(USERS), sid=st.sampled_from(SIDS), state=STATE | st.none())
    def create_session(self, user: str, sid: str, state: dict[str, Any] | None) -> None:
        args = {"app_name": APP, "user_id": user, "session_id": sid, "state": state}
        outcomes = []
        for service in (self.ours, self.theirs):
            try:
                outcomes.append(self.run(service.create_session, **args))
            except Exception as exc:
                outcomes.append(type(exc))
        ours, theirs = outcomes
        if isinstance(theirs, type):
            assert ours is theirs, (ours, theirs)
            return
        assert not isinstance(ours, type), ours
        assert same(ours.state, theirs.state), (ours.state, theirs.state)

    @rule(
        user=st.sampled_from(USERS),
        sid=st.sampled_from(SIDS),
        recent=st.none() | st.integers(0, 4),
        after=st.none() | st.integers(0, 8),
    )
    def get_session(self, user: str, sid: str, recent: int | None, after: int | None) -> None:
        config = None
        if recent is not None or after is not None:
            at = None if after is None else self.now - after
            config = GetSessionConfig(num_recent_events=recent, after_timestamp=at)
        ours, theirs = self.both(
            "get_session", app_name=APP, user_id=user, session_id=sid, config=config
        )
        self.check_session(ours, theirs)

    @rule(user=st.none() | st.sampled_from(USERS))
    def list_sessions(self, user: str | None) -> None:
        ours, theirs = self.both("list_sessions", app_name=APP, user_id=user)

        def key(s: AdkSession) -> tuple[str, str]:  # the services' orders differ
            return s.user_id, s.id

        ours_by, theirs_by = sorted(ours.sessions, key=key), sorted(theirs.sessions, key=key)
        assert [key(s) for s in ours_by] == [key(s) for s in theirs_by]
        for mine, reference in zip(ours_by, theirs_by, strict=True):
            assert same(mine.state, reference.state), (mine.state, reference.state)
            assert mine.events == reference.events == []

    @rule(user=st.sampled_from(USERS), sid=st.sampled_from(SIDS))
    def delete_session(self, user: str, sid: str) -> None:
        self.both("delete_session", app_name=APP, user_id=user, session_id=sid)

    @rule(
        user=st.sampled_from(USERS),
        sid=st.sampled_from(SIDS),
        text=TEXT,
        delta=STATE,
        step=st.sampled_from([0.0, 0.5, 1.0]),
    )
    def append_event(
        self, user: str, sid: str, text: str, delta: dict[str, Any], step: float
    ) -> None:
        self.now += step
        get = {"app_name": APP, "user_id": user, "session_id": sid}
        ours_session, theirs_session = self.both("get_session", **get)
        self.check_session(ours_session, theirs_session)
        if theirs_session is None:
            return
        event = Event(
            invocation_id="inv",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=text)]),
            actions=EventActions(state_delta=delta),
            timestamp=self.now,
        )
        ours = self.run(self.ours.append_event, ours_session, event.model_copy(deep=True))
        theirs = self.run(self.theirs.append_event, theirs_session, event.model_copy(deep=True))
        assert same(event_dump(ours), event_dump(theirs))
        # The caller's Session object, as each service left it (temp: state and all).
        self.check_session(ours_session, theirs_session)

    @rule()
    def reopen(self) -> None:
        self.ours.close()
        self.ours = LedgerSessionService(path=self.folder / "ledger.db")

    @invariant()
    def every_session_reads_the_same(self) -> None:
        for user in USERS:
            for sid in SIDS:
                ours, theirs = self.both("get_session", app_name=APP, user_id=user, session_id=sid)
                self.check_session(ours, theirs)


TestLedgerSessionServiceAgainstInMemory = AdkServiceMachine.TestCase
TestLedgerSessionServiceAgainstInMemory.settings = SETTINGS


# -- what the machines found, kept as plain examples --------------------------


def test_a_negative_limit_reads_every_item_as_sqlite_session_does(tmp_path: Path) -> None:
    items = [{"role": "user", "content": str(n)} for n in range(3)]

    async def main() -> None:
        session = LedgerSession("chat", path=tmp_path / "ledger.db")
        await session.add_items(items)
        # SQLiteSession keeps SQLite's LIMIT: a negative one is no limit at all.
        assert await session.get_items(limit=-1) == items
        assert await session.get_items(limit=0) == []
        session.close()

    anyio.run(main)
