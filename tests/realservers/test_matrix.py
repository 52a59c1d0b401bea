"""adapters.matrix against a real Synapse on loopback, with the real broker (echo engine).

Ann (a matrix-nio client) talks to the bot in a DM room and in a room's
thread; the echo engine's reply must come back through the server, in the
same room and thread.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_db
from tests.realservers.matrix_client import MatrixPerson, from_user, joined, text_of
from tests.realservers.processes import START_WITHIN_S, AdapterProcess, expect_login_refused
from tests.realservers.servers import Server, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

CHANNEL = "matrix"
BOT = "@bot:localhost"
INBOUND = "SELECT msg_id, peer_kind, peer_id, thread_id, sender_id, meta, sender_name FROM inbound"


@pytest.fixture
async def ann(synapse: Server) -> Any:
    person = await MatrixPerson(synapse, "ann").start()
    yield person
    await person.close()


def matrix_config(
    socket: Path, server: Server, workdir: Path, account: str = "bot", **matrix: Any
) -> dict[str, Any]:
    secret = workdir / "matrix-password"
    secret.write_text(server.accounts[account] + "\n")
    return {
        "broker": {"socket": str(socket), "channel": CHANNEL},
        "adapter": {
            "give_up_s": 30,
            "retry_initial_s": 0.05,
            "retry_max_s": 0.5,
            "log_level": "DEBUG",
        },
        "matrix": {
            "homeserver": f"http://{server.host}:{server.port}",
            "user_id": f"@{account}:localhost",
            "password_file": str(secret),
            "sync_timeout_s": 5,
            **matrix,
        },
    }


def start_adapter(
    started: list[AdapterProcess], workdir: Path, config: dict[str, Any]
) -> AdapterProcess:
    proc = AdapterProcess("matrix", workdir, config).start()
    started.append(proc)
    proc.wait_connected()
    return proc


async def dm_with(person: MatrixPerson, bot: str = BOT) -> str:
    room = await person.room([bot], direct=True)
    await person.expect(joined(bot, room))
    return room


async def test_dm_and_room_thread_are_answered_in_their_room_and_thread(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, matrix_config(d.socket, synapse, short_tmp))
    dm = await dm_with(ann)
    group = await ann.room([BOT, "@bob:localhost"])
    await ann.expect(joined(BOT, group))

    asked = await ann.say(dm, "hello bot")
    reply = await ann.expect(from_user(BOT, dm, "hello bot"))
    assert "m.relates_to" not in reply["content"]

    root = await ann.say(group, "a thread starts here")
    await ann.say(group, "bot: hello thread", thread=root)
    threaded = await ann.expect(from_user(BOT, group, "bot: hello thread"))
    relation = threaded["content"]["m.relates_to"]
    assert relation["rel_type"] == "m.thread" and relation["event_id"] == root

    rows = {(r[1], r[3]): r for r in query(d, INBOUND)}
    assert rows[("dm", None)][0] == asked and rows[("dm", None)][2] == dm
    group_row = rows[("group", root)]
    assert group_row[2] == group and group_row[4] == "@ann:localhost"
    await ann.client.set_displayname("Ann Example")  # Synapse updates the rooms after it
    await ann.expect(
        lambda e: (
            e.get("room_id") == group
            and e.get("state_key") == ann.user_id
            and (e.get("content") or {}).get("displayname") == "Ann Example"
        )
    )
    await ann.say(group, "named now")
    await ann.expect(from_user(BOT, group, "named now"))
    names = {r[0]: r[6] for r in query(d, INBOUND)}
    assert names[asked] == "ann" and "Ann Example" in names.values()
    assert orjson.loads(group_row[5])["mentioned"] is True
    assert orjson.loads(rows[("group", None)][5])["mentioned"] is False
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 4)


async def test_an_attachment_is_passed_as_metadata_with_its_text(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, matrix_config(d.socket, synapse, short_tmp))
    dm = await dm_with(ann)
    image = {
        "msgtype": "m.image",
        "body": "cat.png",
        "url": "mxc://localhost/abc",
        "info": {"mimetype": "image/png", "size": 1234},
    }
    shown = await ann.send(dm, image)
    # Malformed (Synapse checks body and msgtype only): an edit with no new content.
    broken_edit = {"rel_type": "m.replace", "event_id": shown}
    await ann.send(dm, {"msgtype": "m.text", "body": "* x", "m.relates_to": broken_edit})
    await ann.expect(from_user(BOT, dm, "cat.png"))
    metas = [orjson.loads(r[0]) for r in query(d, "SELECT meta FROM inbound")]
    assert metas == [
        {
            "attachments": [
                {
                    "kind": "m.image",
                    "name": "cat.png",
                    "type": "image/png",
                    "size": 1234,
                    "url": "mxc://localhost/abc",
                }
            ]
        }
    ]
    assert "malformed event" in adapters[0].log()


async def test_a_slow_reply_is_shown_then_edited_to_its_final_text(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon({"engine": {"chunks": 4, "delay_ms": 150}})
    cfg = matrix_config(d.socket, synapse, short_tmp, edit_interval_s=0.1)
    start_adapter(adapters, short_tmp, cfg)
    dm = await dm_with(ann)
    text = "one two three four five six seven eight"
    await ann.say(dm, text)
    final = await ann.expect(from_user(BOT, dm, text))
    from_bot = [e for e in ann.seen if e.get("sender") == BOT and e.get("room_id") == dm]
    from_bot = [e for e in from_bot if e.get("type") == "m.room.message"]
    first = from_bot[0]
    assert "m.new_content" not in first["content"] and text.startswith(str(text_of(first)))
    assert final is not first and len(from_bot) >= 3
    edits = from_bot[1:]
    assert all(e["content"]["m.relates_to"]["rel_type"] == "m.replace" for e in edits)
    assert all(e["content"]["m.relates_to"]["event_id"] == first["event_id"] for e in edits)
    assert text_of(from_bot[-1]) == text
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 1)


async def test_adapter_killed_before_the_ack_catches_up_from_its_token_once(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = matrix_config(d.socket, synapse, short_tmp)
    first = start_adapter(adapters, short_tmp, cfg)
    dm = await dm_with(ann)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)  # the broker cannot ack now
    try:
        text = uniq("only once ")
        sent = await ann.say(dm, text)
        await anyio.to_thread.run_sync(first.wait_log, f"message {sent} to the broker")
        first.kill()
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    start_adapter(adapters, short_tmp, cfg)
    await ann.expect(from_user(BOT, dm, text))
    await ann.say(dm, "sentinel")
    await ann.expect(from_user(BOT, dm, "sentinel"))
    replies = [text_of(e) for e in ann.seen if e.get("sender") == BOT and e.get("room_id") == dm]
    assert replies.count(text) == 1 and replies.count("sentinel") == 1
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 2
    assert query(d, "SELECT count(*) FROM turns") == [(2,)]


async def test_a_broker_restart_loses_nothing_and_repeats_nothing(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, matrix_config(d.socket, synapse, short_tmp))
    dm = await dm_with(ann)
    await ann.say(dm, "before")
    await ann.expect(from_user(BOT, dm, "before"))
    await anyio.to_thread.run_sync(d.kill)
    await ann.say(dm, "while down")
    await anyio.sleep(0.2)
    await anyio.to_thread.run_sync(d.start)
    await ann.expect(from_user(BOT, dm, "while down"))
    await ann.say(dm, "after")
    await ann.expect(from_user(BOT, dm, "after"))
    replies = [text_of(e) for e in ann.seen if e.get("sender") == BOT and e.get("room_id") == dm]
    assert [r for r in replies if r in ("before", "while down", "after")] == [
        "before",
        "while down",
        "after",
    ]
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 3


@pytest.mark.slow  # ~6 s: the server paces the replies at one a second
async def test_the_servers_rate_limit_delays_replies_and_loses_none(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    base = f"http://{synapse.host}:{synapse.port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        login = await http.post(
            "/_matrix/client/v3/login",
            json={
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": "admin"},
                "password": synapse.accounts["admin"],
            },
        )
        token = login.raise_for_status().json()["access_token"]
        limited = await http.post(
            "/_synapse/admin/v1/users/@ratebot:localhost/override_ratelimit",
            json={"messages_per_second": 1, "burst_count": 1},
            headers={"Authorization": f"Bearer {token}"},
        )
        limited.raise_for_status()
    d = make_daemon()
    start_adapter(adapters, short_tmp, matrix_config(d.socket, synapse, short_tmp, "ratebot"))
    dm = await dm_with(ann, "@ratebot:localhost")
    # One at a time (messages sent during a turn could share the next turn):
    # each reply comes within the second after the one before, so it is refused.
    texts = [f"paced {n}" for n in range(3)]
    for text in texts:
        await ann.say(dm, text)
        await ann.expect(from_user("@ratebot:localhost", dm, text))
    replies = [text_of(e) for e in ann.seen if e.get("sender") == "@ratebot:localhost"]
    assert [r for r in replies if r in texts] == texts
    assert "rate-limited" in adapters[0].log()


async def test_a_refused_login_is_logged_and_ends_with_exit_75(
    synapse: Server, adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    cfg = matrix_config(short_tmp / "no-broker.sock", synapse, short_tmp)
    await expect_login_refused("matrix", short_tmp, cfg, adapters)


async def test_a_catch_up_longer_than_the_sync_timeline_is_filled_in_whole(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = matrix_config(d.socket, synapse, short_tmp, timeline_limit=2)
    first = start_adapter(adapters, short_tmp, cfg)
    dm = await dm_with(ann)
    await ann.say(dm, "first")
    await ann.expect(from_user(BOT, dm, "first"))
    assert await anyio.to_thread.run_sync(first.stop) == 0
    sent = [await ann.say(dm, f"while away {n}") for n in range(6)]
    start_adapter(adapters, short_tmp, cfg)
    await wait_db(d, "SELECT count(*) FROM inbound WHERE channel = ?", (CHANNEL,), 7)
    ids = [r[0] for r in query(d, "SELECT msg_id FROM inbound ORDER BY rowid")]
    assert ids[1:] == sent  # all of them, once, in the server's order
    assert "caught up" in adapters[-1].log()


async def test_a_server_that_is_down_is_retried_then_exit_75(
    adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    down = Server("down", "127.0.0.1", free_port(), short_tmp, None, {"bot": "x"})  # type: ignore[arg-type]
    cfg = matrix_config(short_tmp / "no-broker.sock", down, short_tmp)
    cfg["adapter"]["give_up_s"] = 0.5
    proc = AdapterProcess("matrix", short_tmp, cfg).start()
    adapters.append(proc)
    assert await anyio.to_thread.run_sync(proc.wait_exit, START_WITHIN_S) == 75
    log = proc.log()
    assert "retrying in" in log and "giving up" in log
