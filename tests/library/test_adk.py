"""`LedgerSessionService` as Google ADK sees it: sessions, events that come back
equal, ADK's state prefixes, the reads `GetSessionConfig` asks for, concurrent
appends kept whole, and bad input refused with nothing stored. (ADK's own
session tests run against it too: docs/integrations.md.)"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests import ledger_db

pytest.importorskip("google.adk")

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
)
from google.genai import types

from ledger.api import LedgerError, NotALedger
from ledger.integrations.adk import LedgerSessionService
from tests.harness import DaemonProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # ADK runs on asyncio; the concurrency test runs on trio too


APP, USER = "weather", "ada"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def service(path: Path) -> Iterator[LedgerSessionService]:
    svc = LedgerSessionService(path=path)
    yield svc
    svc.close()


def text_event(text: str, ts: float | None = None, delta: dict[str, Any] | None = None) -> Event:
    extra: dict[str, Any] = {} if ts is None else {"timestamp": ts}
    return Event(
        invocation_id="inv-1",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
        **extra,
    )


def rich_events() -> list[Event]:
    """One event of each kind a run writes, with bytes and nested models."""
    call = types.FunctionCall(id="call-1", name="forecast", args={"city": "Zürich", "days": 3})
    return [
        text_event("Weather in Zürich? ✓"),
        Event(
            invocation_id="inv-1",
            author="forecaster",
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            long_running_tool_ids={"call-1"},
        ),
        Event(
            invocation_id="inv-1",
            author="forecaster",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="call-1", name="forecast", response={"temps": [3.5, 4, None]}
                        )
                    ),
                    types.Part.from_bytes(data=b"\x00\x89PNG\xff", mime_type="image/png"),
                ],
            ),
            grounding_metadata=types.GroundingMetadata(
                search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob\x00")
            ),
        ),
        Event(
            invocation_id="inv-1",
            author="forecaster",
            content=types.Content(role="model", parts=[types.Part(text="Cold.")]),
            turn_complete=True,
            error_code="none",
            custom_metadata={"trace": {"span": 7, "tags": ["a", "b"]}},
            actions=EventActions(
                state_delta={"last_city": "Zürich"},
                artifact_delta={"chart.png": 0},
                transfer_to_agent="helper",
                escalate=True,
            ),
        ),
    ]


async def test_it_is_a_session_service_and_events_round_trip(
    service: LedgerSessionService,
) -> None:
    assert isinstance(service, BaseSessionService)
    session = await service.create_session(app_name=APP, user_id=USER, state={"unit": "C"})
    assert session.id and session.state == {"unit": "C"} and session.events == []
    for event in rich_events():
        await service.append_event(session, event)
    got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got == session
    assert got is not None and [e.model_dump() for e in got.events] == [
        e.model_dump() for e in session.events
    ]
    assert got.state == {"unit": "C", "last_city": "Zürich"}


async def test_a_reopened_ledger_has_every_session_as_it_was(path: Path) -> None:
    first = LedgerSessionService(path=path)
    session = await first.create_session(app_name=APP, user_id=USER, session_id="s1")
    for event in rich_events():
        await first.append_event(session, event)
    first.close()
    second = LedgerSessionService(path=path)
    try:
        assert await second.get_session(app_name=APP, user_id=USER, session_id="s1") == session
    finally:
        second.close()


async def test_app_state_is_the_apps_user_state_the_users_temp_state_never_stored(
    service: LedgerSessionService, path: Path
) -> None:
    s1 = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"app:motd": "hi", "temp:x": 1}
    )
    delta = {"app:v": 2, "user:lang": "fr", "temp:scratch": "SECRET", "n": 1}
    await service.append_event(s1, text_event("go", delta=delta))
    # The caller's session sees its temp key for the rest of the invocation.
    assert s1.state == {
        "app:motd": "hi",
        "app:v": 2,
        "user:lang": "fr",
        "n": 1,
        "temp:scratch": "SECRET",
    }
    s2 = await service.create_session(app_name=APP, user_id=USER, session_id="s2")
    other = await service.create_session(app_name=APP, user_id="bob", session_id="s3")
    elsewhere = await service.create_session(app_name="other-app", user_id=USER)
    assert s2.state == {"app:motd": "hi", "app:v": 2, "user:lang": "fr"}
    assert other.state == {"app:motd": "hi", "app:v": 2}
    assert elsewhere.state == {}
    stored = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert stored is not None
    assert stored.state == {"app:motd": "hi", "app:v": 2, "user:lang": "fr", "n": 1}
    assert stored.events[0].actions.state_delta == {"app:v": 2, "user:lang": "fr", "n": 1}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"lang": "fr"}
    assert await service.get_user_state(app_name=APP, user_id="nobody") == {}
    service.close()
    raw = b"".join(p.read_bytes() for p in path.parent.glob("sessions.db*"))
    assert b"SECRET" not in raw and b"temp:" not in raw


async def test_get_session_config_picks_recent_and_later_events(
    service: LedgerSessionService,
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    for ts in range(1, 6):
        await service.append_event(session, text_event(f"e{ts}", ts=float(ts)))

    async def stamps(**config: Any) -> list[float]:
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=GetSessionConfig(**config)
        )
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await stamps() == [1, 2, 3, 4, 5]
    assert await stamps(num_recent_events=3) == [3, 4, 5]
    assert await stamps(num_recent_events=0) == []
    assert await stamps(num_recent_events=99) == [1, 2, 3, 4, 5]
    assert await stamps(after_timestamp=4.0) == [4, 5]
    assert await stamps(after_timestamp=50.0) == []
    assert await stamps(after_timestamp=2.0, num_recent_events=2) == [4, 5]
    assert await stamps(after_timestamp=4.0, num_recent_events=3) == [4, 5]


async def test_list_sessions_per_user_and_per_app_oldest_update_first(
    service: LedgerSessionService,
) -> None:
    clock = iter(float(t) for t in range(100, 200))
    timed = LedgerSessionService(path=service.store.path, clock=lambda: next(clock))
    try:
        # Ids holding the label's separators must not reach into each other's ranges.
        for user, sid in [(USER, "b"), ("bob", "a"), (USER, "a:b"), ("ada:x", "y"), (USER, "%3A")]:
            await timed.create_session(app_name=APP, user_id=user, session_id=sid, state={"s": sid})
        await timed.create_session(app_name=APP + ":x", user_id=USER, session_id="z")
        first = await timed.get_session(app_name=APP, user_id=USER, session_id="b")
        assert first is not None
        await timed.append_event(first, text_event("later", ts=500.0))
        mine = (await timed.list_sessions(app_name=APP, user_id=USER)).sessions
        assert [s.id for s in mine] == ["a:b", "%3A", "b"]
        assert [s.state for s in mine] == [{"s": "a:b"}, {"s": "%3A"}, {"s": "b"}]
        assert all(s.events == [] for s in mine) and mine[-1].last_update_time == 500.0
        everyone = (await timed.list_sessions(app_name=APP)).sessions
        assert [(s.user_id, s.id) for s in everyone] == [
            ("bob", "a"), (USER, "a:b"), ("ada:x", "y"), (USER, "%3A"), (USER, "b"),
        ]  # fmt: skip
        assert (await timed.list_sessions(app_name="nope")).sessions == []
    finally:
        timed.close()


async def test_create_conflicts_delete_and_missing_sessions(service: LedgerSessionService) -> None:
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    session = await service.create_session(app_name=APP, user_id=USER, session_id=" s ")
    assert session.id == "s"
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
    # The same id under another user is another session.
    await service.create_session(app_name=APP, user_id="bob", session_id="s")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")  # a no-op
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    assert await service.get_session(app_name=APP, user_id="bob", session_id="s") is not None
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, text_event("to nowhere"))


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_concurrent_appends_to_one_session_are_all_kept_in_commit_order(
    service: LedgerSessionService,
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    stale = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stale is not None
    n = 60
    async with anyio.create_task_group() as tg:
        for i in range(n):
            # Half through the caller's session, half through a copy read before
            # any of them: ADK's own services refuse the second as stale.
            target = session if i % 2 else stale
            tg.start_soon(service.append_event, target, text_event(f"m{i}", delta={f"k{i}": i}))
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert got is not None
    texts = [e.content.parts[0].text or "" for e in got.events if e.content and e.content.parts]
    assert sorted(texts) == sorted(f"m{i}" for i in range(n))
    assert got.state == {f"k{i}": i for i in range(n)}
    ids = [e.id for e in got.events]
    assert len(set(ids)) == n
    # Each Session object holds the events appended through it, each once.
    assert len(session.events) == len(stale.events) == n // 2
    assert {e.id for e in session.events} | {e.id for e in stale.events} == set(ids)


async def test_unserializable_state_is_refused_naming_it_and_nothing_is_stored(
    service: LedgerSessionService,
) -> None:
    with pytest.raises(TypeError, match=r"state 'user:callback' \(builtin_function"):
        await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"ok": 1, "user:callback": print}
        )
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    assert await service.get_user_state(app_name=APP, user_id=USER) == {}

    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, text_event("kept", delta={"n": 1}))
    before = session.model_copy(deep=True)
    bad = text_event("lost", delta={"app:k": 1, "temp:t": 2, "handle": object()})
    with pytest.raises(TypeError, match=r"state_delta 'handle' \(object"):
        await service.append_event(session, bad)
    # orjson, which stores every item, holds integers of 64 bits at most.
    with pytest.raises(TypeError, match=r"state_delta 'user:big' \(int.*64-bit"):
        await service.append_event(session, text_event("lost", delta={"user:big": 2**70}))
    odd = text_event("lost too")
    odd.custom_metadata = {"lock": anyio.Lock()}
    with pytest.raises(TypeError, match=rf"event {odd.id!r}"):
        await service.append_event(session, odd)
    huge = text_event("lost as well")
    huge.custom_metadata = {"count": 2**70}
    with pytest.raises(TypeError, match=rf"event {huge.id!r} cannot be stored.*64-bit"):
        await service.append_event(session, huge)
    assert session == before  # the caller's session is as it was, temp keys too
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert got == before
    assert (await service.list_sessions(app_name=APP)).sessions[0].state == {"n": 1}


async def test_a_partial_event_is_not_stored(service: LedgerSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    streamed = text_event("stream chunk")
    streamed.partial = True
    assert await service.append_event(session, streamed) is streamed
    got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.events == [] and session.events == []


async def test_the_ledger_sees_an_adk_session_as_a_session_of_turns(
    service: LedgerSessionService, path: Path
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    for event in rich_events():
        await service.append_event(session, event)
    info = await service.store.get("adk:weather:ada:s")
    assert info.turns == len(rich_events())
    exported = await service.store.export_jsonl("adk:weather:ada:s")
    assert exported.count(b"\n") > len(rich_events())
    with ledger_db.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM adk_shared_state").fetchone() == (0,)


def test_every_returned_append_event_survives_kill_9(path: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import asyncio
                from google.adk.events.event import Event
                from google.adk.events.event_actions import EventActions
                from ledger.integrations.adk import LedgerSessionService

                async def main():
                    service = LedgerSessionService(path={str(path)!r})
                    session = await service.create_session(
                        app_name="app", user_id="u", session_id="s"
                    )
                    n = 0
                    while True:
                        delta = {{"n": n, "user:n": n}}
                        event = Event(author=str(n), actions=EventActions(state_delta=delta))
                        await service.append_event(session, event)
                        print(n, flush=True)
                        n += 1

                asyncio.run(main())
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked = [int(child.stdout.readline()) for _ in range(200)]
    child.kill()
    child.wait(10)
    child.stdout.close()
    service = LedgerSessionService(path=path)
    try:
        got = anyio.run(
            functools.partial(service.get_session, app_name="app", user_id="u", session_id="s")
        )
    finally:
        service.close()
    assert got is not None
    authors = [int(e.author) for e in got.events]
    assert authors == list(range(len(authors))) and len(authors) >= len(acked)
    # The state is the last stored event's, whatever the kill cut short.
    assert got.state == {"n": authors[-1], "user:n": authors[-1]}


def test_a_file_that_is_not_a_ledger_is_refused_and_left_untouched(tmp_path: Path) -> None:
    # ADK's own SqliteSessionService file is another program's database.
    theirs = tmp_path / "adk.db"
    with ledger_db.connect(theirs) as conn:
        conn.execute("CREATE TABLE events (id TEXT, event_data TEXT)")
    before = theirs.read_bytes()
    with pytest.raises(NotALedger, match="events"):
        LedgerSessionService(path=theirs)
    assert theirs.read_bytes() == before
    with pytest.raises(LedgerError, match="nowhere"):
        LedgerSessionService(path=tmp_path / "nowhere" / "sessions.db")


async def test_through_a_daemon_socket(daemon: DaemonProcess) -> None:
    remote = LedgerSessionService(socket=daemon.socket)
    made = await remote.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"app:lang": "en", "k": 1, "temp:t": 0}
    )
    assert made.state == {"app:lang": "en", "k": 1}
    events = [text_event("hi", delta={"user:name": "Ada", "k": 2}), text_event("there")]
    for event in events:
        await remote.append_event(made, event)
    got = await remote.get_session(app_name=APP, user_id=USER, session_id="s")
    assert got is not None
    assert got.events == events
    assert got.state == {"app:lang": "en", "user:name": "Ada", "k": 2}
    assert got.last_update_time == events[-1].timestamp
    recent = await remote.get_session(
        app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(num_recent_events=1)
    )
    assert recent is not None and recent.events == events[-1:]
    listed = await remote.list_sessions(app_name=APP, user_id=USER)
    assert [(s.id, s.state) for s in listed.sessions] == [("s", got.state)]
    assert await remote.get_user_state(app_name=APP, user_id=USER) == {"name": "Ada"}
    # The daemon's own ledger holds it, as a session of turns.
    store = await remote.remote()
    assert len(await store.items("adk:weather:ada:s")) == 2
    with pytest.raises(AlreadyExistsError):
        await remote.create_session(app_name=APP, user_id=USER, session_id="s")
    ghost = made.model_copy(update={"id": "ghost"})
    with pytest.raises(SessionNotFoundError):
        await remote.append_event(ghost, text_event("lost"))
    await remote.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert await remote.get_session(app_name=APP, user_id=USER, session_id="s") is None
    remote.close()
    with pytest.raises(RuntimeError):
        await remote.get_session(app_name=APP, user_id=USER, session_id="s")


def test_path_or_socket_but_not_both(path: Path) -> None:
    with pytest.raises(ValueError, match="either path"):
        LedgerSessionService(path=path, socket="/run/x.sock")
    with pytest.raises(ValueError, match="either path"):
        LedgerSessionService()


def test_the_migration_moves_a_session_record_out_of_the_session_row(tmp_path: Path) -> None:
    from ledger.db import load_migrations

    migrations = load_migrations()
    (ours,) = [m for m in migrations if m.name == "adk_sessions"]
    conn = ledger_db.connect(tmp_path / "old.db", isolation_level=None)
    for migration in migrations[: migrations.index(ours)]:
        conn.executescript(migration.sql)
    record = {
        "app": APP,
        "user": USER,
        "id": "s",
        "state": {"k": [1, "x"]},
        "create_time": 1764000000.25,
        "update_time": 1764000001.123456,
    }
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, metadata, created_at, updated_at)"
        " VALUES ('adk:weather:ada:s', 'library', 'library', ?, 1, 1),"
        " ('lib:other', 'library', 'library', '{\"k\": 1}', 1, 1)",
        (json.dumps({"adk": record}),),
    )
    conn.executescript(ours.sql)
    assert conn.execute("SELECT * FROM adk_sessions").fetchall() == [
        ("adk:weather:ada:s", APP, USER, "s", '{"k":[1,"x"]}', 1764000000.25, 1764000001.123456)
    ]
    assert conn.execute("SELECT label, metadata FROM sessions ORDER BY label").fetchall() == [
        ("adk:weather:ada:s", None),
        ("lib:other", '{"k": 1}'),
    ]
