"""`entity.erase` against the real daemon (its writer process, its checkpointer): the
op, `brokerctl erase`, the raw bytes of the ledger, its WAL and a backup made after,
and an erasure cut off by kill -9 that the next start finishes."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ledger.port.cipher import DRIVER_ENV, SECURE_DELETE
from ledger.port.errors import NotFound
from ledger.transfer import backup, export_session
from tests import ledger_db
from tests.ctl import in_process
from tests.harness import DaemonProcess, write_config
from tests.integration.test_identity import (
    adapter,
    contact,
    inbound,
    op,
    operator,
    query,
    say,
    uniq,
)
from wire.client import BrokerError

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"], ids=["d-asyncio", "d-trio"])
def daemon(request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))  # a short socket path
    d = DaemonProcess(work, {}, backend=request.param).start()
    try:
        yield d
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


# The index's two ways of forgetting: FTS5 secure-delete (SQLite 3.42 and later, the
# default driver here) and, forced to the standard library's older SQLite, the merge.
DRIVERS = (["sqlcipher3"] if importlib.util.find_spec("sqlcipher3") else []) + (
    ["stdlib"] if sqlite3.sqlite_version_info < SECURE_DELETE else []
)


@pytest.fixture(params=[(b, v) for b in ("asyncio", "trio") for v in DRIVERS],
                ids=lambda p: f"d-{p[0]}-{p[1]}")  # fmt: skip
def erasing(request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    backend, driver = request.param
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))
    d = DaemonProcess(work, {}, backend=backend, env={DRIVER_ENV: driver}).start()
    try:
        yield d
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


def raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def brokerctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--socket", str(d.socket), "--json", *args)


async def test_erase_through_the_daemon_leaves_no_byte(
    erasing: DaemonProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = erasing
    monkeypatch.setenv(DRIVER_ENV, d.env[DRIVER_ENV])  # the test's reads and backup too
    channel = uniq("c")
    marker = uniq("zqxmark")
    async with await adapter(d, channel) as a, await operator(d) as o:
        for n in range(5):
            await say(a, inbound(uniq("m"), "carol", text=f"carol {n} says {marker}"))
        await say(a, inbound(uniq("m"), "dave", text="dave keeps his words"))
        group = {"peer_kind": "group", "peer_id": "room"}
        await say(a, inbound(uniq("m"), "carol", text="carol in the room", **group))
        await say(a, inbound(uniq("m"), "dave", text="dave in the room", **group))
        carol = (await contact(o, channel, "carol"))["entity"]
        dave = await contact(o, channel, "dave")
        assert marker.encode() in raw(d.ledger)

        with pytest.raises(BrokerError) as refused:
            await op(o, "entity.erase", entity=carol, confirm="ent_other")
        assert refused.value.code == "invalid"
        with pytest.raises(BrokerError) as missing:
            await op(o, "entity.erase", entity="ent_nobody", confirm="ent_nobody")
        assert missing.value.code == "not_found"

        done = brokerctl(d, "erase", carol)  # no terminal to ask on: refused
        assert done.returncode == 64 and "--yes" in done.stderr
        done = brokerctl(d, "erase", carol, "--yes")
        assert done.returncode == 0, done.stderr
        counts = json.loads(done.stdout)
        assert counts["entity"] == carol and counts["sessions"] == 1
        assert counts["messages"] >= 11  # five turns of two, and one in the room

        with pytest.raises(BrokerError) as gone:
            await contact(o, channel, "carol")
        assert gone.value.code == "not_found"
        assert await contact(o, channel, "dave") == dave
        assert await op(o, "recall.search", query=marker) == []
        room = [h["session"] for h in await op(o, "recall.search", query="erased")]
        assert room and all(s.startswith("group:") for s in room)

    secure = query(d, "SELECT index_merge = 0 FROM erasures") == [(1,)]
    assert secure == (d.env[DRIVER_ENV] == "sqlcipher3")  # which way the index forgot
    copy = tmp_path / "after.db"
    assert backup(d.ledger, copy) == []
    for data in (raw(d.ledger), copy.read_bytes()):
        assert marker.encode() not in data and marker[-12:].encode() not in data
    assert query(d, "SELECT entity_id, finished_at IS NOT NULL FROM erasures") == [(carol, 1)]
    assert query(d, "SELECT entities, sessions, senders FROM erasures") == [(None, None, None)]


async def test_an_erasure_cut_off_is_finished_at_the_next_start(daemon: DaemonProcess) -> None:
    d = daemon
    channel, marker = uniq("c"), uniq("zqxcut")
    async with await adapter(d, channel) as a, await operator(d) as o:
        await say(a, inbound(uniq("m"), "erin", text=f"erin says {marker}"))
        erin = (await contact(o, channel, "erin"))["entity"]
    d.kill()  # kill -9
    # The marking transaction committed, and then the daemon died.
    ledger_db.mark_erasure(d.ledger, erin)
    d.start()
    async with await operator(d) as o:
        for _ in range(100):
            if query(d, "SELECT count(*) FROM erasures WHERE finished_at IS NULL") == [(0,)]:
                break
            await anyio.sleep(0.05)
        assert await op(o, "recall.search", query=marker) == []
    assert query(d, "SELECT count(*) FROM sessions WHERE entity_id = ?", erin) == [(0,)]
    assert marker.encode() not in raw(d.ledger)


async def test_expiry_runs_at_start_and_health_shows_it(daemon: DaemonProcess) -> None:
    d = daemon
    channel, marker = uniq("c"), uniq("zqxold")
    async with await adapter(d, channel) as a, await operator(d) as o:
        for n in range(3):
            await say(a, inbound(uniq("m"), "fred", text=f"fred {n} {marker}"))
        assert (await op(o, "health"))["retention"] == {
            "keep_days": 0.0,
            "last_run": None,
            "expired_turns": 0,
        }
    d.kill()
    d.config["retention"] = {"keep_days": 1e-9}  # everything that has ended is old
    write_config(d.config_path, d.config)
    d.start()
    async with await operator(d) as o:
        for _ in range(200):
            if (await op(o, "health"))["retention"]["last_run"] is not None:
                break
            await anyio.sleep(0.05)
        shown = (await op(o, "health"))["retention"]
        assert shown["keep_days"] == 1e-9 and shown["expired_turns"] == 2  # the head stays
        hits = await op(o, "recall.search", query=marker)
        heads = query(d, "SELECT head_turn_id FROM sessions WHERE kind = 'dm'")
        assert {h["turn"] for h in hits} == {r[0] for r in heads}
    assert query(d, "SELECT count(*) FROM turns WHERE expired_at IS NOT NULL") == [(2,)]
    data = raw(d.ledger)
    assert f"fred 0 {marker}".encode() not in data and f"fred 1 {marker}".encode() not in data


async def test_a_route_rules_own_keep_days_expires_its_sessions_alone(
    daemon: DaemonProcess,
) -> None:
    d = daemon
    channel = uniq("c")
    group = {"peer_kind": "group", "peer_id": "room"}
    async with await adapter(d, channel) as a:
        for n in range(3):
            await say(a, inbound(uniq("m"), "hal", text=f"hal {n} in the room", **group))
            await say(a, inbound(uniq("m"), "hal", text=f"hal {n} alone"))
    d.kill()
    rule = {"name": "groups", "match": {"peer_kind": ["group"]}, "keep_days": 1e-9}
    d.config["routes"] = [rule]  # the global keep_days stays 0: forever
    write_config(d.config_path, d.config)
    d.start()
    async with await operator(d) as o:
        for _ in range(200):
            if (await op(o, "health"))["retention"]["last_run"] is not None:
                break
            await anyio.sleep(0.05)
        shown = (await op(o, "health"))["retention"]
        assert shown["keep_days"] == 0 and shown["rules"] == {"groups": 1e-9}
        assert shown["expired_turns"] == 2  # the room's head stays
    expired = query(
        d,
        "SELECT s.kind, count(*) FROM turns t JOIN sessions s ON s.label = t.session_label"
        " WHERE t.expired_at IS NOT NULL GROUP BY s.kind",
    )
    assert expired == [("group", 2)]


async def test_between_the_mark_and_the_rows_the_daemon_reads_nothing_of_theirs(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """The erasure is marked beside the running daemon (its steps never come: the
    daemon resumes erasures only at start), so it stays between mark and rows while
    every read through the daemon, the library's included, and brokerctl's own
    export of the file are asked."""
    d = daemon
    channel, marker, in_room = uniq("c"), uniq("zqxmid"), uniq("zqxroom")
    async with await adapter(d, channel) as a, await operator(d) as o:
        await say(a, inbound(uniq("m"), "fay", text=f"fay says {marker}"))
        group = {"peer_kind": "group", "peer_id": "room"}
        await say(a, inbound(uniq("m"), "fay", text=f"fay in the room {in_room}", **group))
        await say(a, inbound(uniq("m"), "gus", text="gus in the room", **group))
        await say(a, inbound(uniq("m"), "gus", text="gus alone"))
        fay = (await contact(o, channel, "fay"))["entity"]
        fay_session = (await contact(o, channel, "fay"))["session"]
        room = next(
            s["label"] for s in await op(o, "sessions.list") if s["label"].startswith("group:")
        )
        gus = await op(o, "session.show", session=(await contact(o, channel, "gus"))["session"])
        assert marker in json.dumps(await op(o, "session.show", session=fay_session))

        ledger_db.mark_erasure(d.ledger, fay)

        for name, args in (
            ("session.show", {"session": fay_session}),
            ("session.state", {"session": fay_session}),
            ("entity.show", {"entity": fay}),
            ("contact.show", {"channel": channel, "sender_id": "fay"}),
            ("store.call", {"call": "items", "args": {"session": fay_session}}),
        ):
            with pytest.raises(BrokerError) as gone:
                await op(o, name, **args)
            assert gone.value.code == "not_found", name
        assert await op(o, "recall.search", query=marker) == []
        # The echo engine's reply in the room quotes her: others' words stay (documented).
        assert [h["role"] for h in await op(o, "recall.search", query=in_room)] == ["assistant"]
        listed = json.dumps(await op(o, "sessions.list"))
        assert fay_session not in listed and room in listed
        items = await op(o, "store.call", call="items", args={"session": room})
        said = [i["content"] for i in items if i.get("role") == "user"]
        assert said == ["[erased]", "gus in the room"], items
        assert await op(o, "session.show", session=gus["label"]) == gus
    intents = exported_room(d, room)  # what `brokerctl export` runs, on the file itself
    assert intents == [[], [("gus", "gus in the room")]]
    with pytest.raises(NotFound):
        export_session(d.ledger, "NORMAL", fay_session, 1, io.BytesIO().write)
    d.kill()
    d.start()  # the erasure resumes and finishes
    for _ in range(200):
        if query(d, "SELECT count(*) FROM erasures WHERE finished_at IS NULL") == [(0,)]:
            break
        await anyio.sleep(0.05)
    assert exported_room(d, room) == [[("[erased]", "[erased]")], [("gus", "gus in the room")]]


def exported_room(d: DaemonProcess, room: str) -> list[list[tuple[str, str]]]:
    """The room's export: its messages from people are fay's `[erased]` and gus's; each
    turn's intent, as (sender, text) of its inputs, is returned."""
    out = io.BytesIO()
    export_session(d.ledger, "NORMAL", room, 1, out.write)
    turns = [json.loads(line) for line in out.getvalue().splitlines()][1:]
    said = [m["content"] for t in turns for m in t["messages"] if m["role"] == "user"]
    assert said == ["[erased]", "gus in the room"]
    return [
        [
            (i["sender"], i["text"])
            for e in t["events"]
            if e["type"] == "intent"
            for i in e["payload"]["inputs"]
        ]
        for t in turns
    ]
