"""adapters.xmpp against a real Prosody on loopback, with the real broker (echo engine).

Ann (a slixmpp client) talks to the bot in a chat and in a room; the echo
engine's reply must come back through the server, in the same thread.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from slixmpp import Message

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_db, wait_until
from tests.realservers.processes import AdapterProcess, expect_login_refused
from tests.realservers.servers import Server
from tests.realservers.xmpp_client import XmppPerson

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

CHANNEL = "xmpp"
BOT = "bot@localhost"
INBOUND = "SELECT msg_id, peer_kind, peer_id, thread_id, sender_id, meta FROM inbound"


@pytest.fixture
async def ann(prosody: Server) -> Any:
    person = await XmppPerson(prosody, "ann").start()
    yield person
    await person.close()


def xmpp_config(socket: Path, server: Server, workdir: Path, **xmpp: Any) -> dict[str, Any]:
    secret = workdir / "xmpp-password"
    secret.write_text(server.accounts["bot"] + "\n")
    return {
        "broker": {"socket": str(socket), "channel": CHANNEL},
        "adapter": {
            "give_up_s": 30,
            "retry_initial_s": 0.05,
            "retry_max_s": 0.5,
            "log_level": "DEBUG",
        },
        "xmpp": {
            "jid": BOT,
            "password_file": str(secret),
            "host": server.host,
            "port": server.port,
            "plaintext": True,
            "nick": "agentbot",
            **xmpp,
        },
    }


def start_adapter(
    started: list[AdapterProcess], workdir: Path, config: dict[str, Any]
) -> AdapterProcess:
    proc = AdapterProcess("xmpp", workdir, config).start()
    started.append(proc)
    proc.wait_connected()
    return proc


def body_from(sender: str, body: str) -> Callable[[Message], bool]:
    return lambda m: str(m["from"]).startswith(sender) and m["body"] == body


async def test_chat_and_room_messages_are_answered_in_their_thread(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    room = f"{uniq('room').lower()}@conference.localhost"
    await ann.join(room, "ann")
    start_adapter(adapters, short_tmp, xmpp_config(d.socket, prosody, short_tmp, rooms=[room]))

    ann.say(BOT, "hello bot", thread="t-dm")
    dm = await ann.expect(body_from(BOT, "hello bot"))
    assert dm["type"] == "chat" and dm["thread"] == "t-dm"

    ann.say(room, "agentbot: hello room", group=True, thread="t-room")
    reply = await ann.expect(body_from(f"{room}/agentbot", "agentbot: hello room"))
    assert reply["type"] == "groupchat" and reply["thread"] == "t-room"

    rows = {r[1]: r for r in query(d, INBOUND)}
    assert rows["dm"][2:5] == ("ann@localhost", "t-dm", "ann@localhost")
    assert rows["group"][2:5] == (room, "t-room", f"{room}/ann")
    assert orjson.loads(rows["group"][5])["mentioned"] is True
    assert all(r[0].startswith("xmpp-") for r in rows.values())
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 2)


async def test_a_slow_reply_is_shown_then_corrected_to_its_final_text(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon({"engine": {"chunks": 4, "delay_ms": 150}})
    cfg = xmpp_config(d.socket, prosody, short_tmp, correction_interval_s=0.1)
    start_adapter(adapters, short_tmp, cfg)
    text = "one two three four five six seven eight"
    ann.say(BOT, text)
    final = await ann.expect(body_from(BOT, text))
    from_bot = [m for m in ann.seen if str(m["from"]).startswith(BOT)]
    first = from_bot[0]
    assert not first["replace"]["id"] and text.startswith(str(first["body"])) and first is not final
    assert final["replace"]["id"] == first["id"]
    assert all(m["replace"]["id"] == first["id"] for m in from_bot[1:])
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 1)


async def test_adapter_killed_before_the_ack_catches_up_from_the_archive_once(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = xmpp_config(d.socket, prosody, short_tmp)
    first = start_adapter(adapters, short_tmp, cfg)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)  # the broker cannot ack now
    try:
        text = uniq("only once ")
        ann.say(BOT, text)
        await anyio.to_thread.run_sync(first.wait_log, "to the broker")
        first.kill()
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    start_adapter(adapters, short_tmp, cfg)
    await ann.expect(body_from(BOT, text))
    ann.say(BOT, "sentinel")
    await ann.expect(body_from(BOT, "sentinel"))
    replies = [str(m["body"]) for m in ann.seen if str(m["from"]).startswith(BOT)]
    assert replies.count(text) == 1 and replies.count("sentinel") == 1
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 2
    assert query(d, "SELECT count(*) FROM turns") == [(2,)]


async def test_a_broker_restart_loses_nothing_and_repeats_nothing(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, xmpp_config(d.socket, prosody, short_tmp))
    ann.say(BOT, "before")
    await ann.expect(body_from(BOT, "before"))
    await anyio.to_thread.run_sync(d.kill)
    ann.say(BOT, "while down")
    await anyio.sleep(0.2)
    await anyio.to_thread.run_sync(d.start)
    await ann.expect(body_from(BOT, "while down"))
    ann.say(BOT, "after")
    await ann.expect(body_from(BOT, "after"))
    replies = [str(m["body"]) for m in ann.seen if str(m["from"]).startswith(BOT)]
    assert [r for r in replies if r in ("before", "while down", "after")] == [
        "before",
        "while down",
        "after",
    ]
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 3


async def test_a_refused_login_is_logged_and_ends_with_exit_75(
    prosody: Server, adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    cfg = xmpp_config(short_tmp / "no-broker.sock", prosody, short_tmp)
    await expect_login_refused("xmpp", short_tmp, cfg, adapters)


async def test_a_position_gone_from_the_archive_neither_stops_nor_sticks(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = xmpp_config(d.socket, prosody, short_tmp)
    state = short_tmp / "state"
    state.mkdir()
    (state / "positions.json").write_bytes(orjson.dumps({f"mam:{BOT}": {"after": "expired"}}))
    start_adapter(adapters, short_tmp, cfg)  # Prosody 0.12 answers an empty page, not an error
    ann.say(BOT, "still served")
    await ann.expect(body_from(BOT, "still served"))

    async def moved_on() -> bool:
        position = orjson.loads((state / "positions.json").read_bytes())[f"mam:{BOT}"]
        return bool(position.get("after")) and position["after"] != "expired"

    await wait_until(moved_on, "the position past the acked message")
