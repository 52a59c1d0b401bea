"""adapters.irc against a real ngIRCd on loopback, with the real broker (echo engine).

A person (a plain IRC client) talks to the bot in private and in a channel;
the echo engine's reply must come back through the server to the right place.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_db, wait_until
from tests.realservers.irc_client import IrcClient, privmsg_from
from tests.realservers.processes import START_WITHIN_S, AdapterProcess
from tests.realservers.servers import Server, free_port, start_ngircd

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

CHANNEL = "irc"
INBOUND = "SELECT msg_id, peer_kind, peer_id, sender_id, meta FROM inbound WHERE channel = ?"


def irc_config(socket: Path, server: Server, nick: str, **irc: Any) -> dict[str, Any]:
    return {
        "broker": {"socket": str(socket), "channel": CHANNEL},
        "adapter": {"give_up_s": 30, "retry_initial_s": 0.05, "retry_max_s": 0.5},
        "irc": {"host": server.host, "port": server.port, "nick": nick, **irc},
    }


@pytest.fixture
def workdir(short_tmp: Path) -> Path:
    return short_tmp


def start_adapter(
    started: list[AdapterProcess], workdir: Path, config: dict[str, Any]
) -> AdapterProcess:
    proc = AdapterProcess("irc", workdir, config).start()
    started.append(proc)
    return proc


@pytest.mark.anyio
@asyncio_only
async def test_dm_and_channel_messages_are_answered_through_the_server(
    ngircd: Server, make_daemon: DaemonFactory, adapters: list[AdapterProcess], workdir: Path
) -> None:
    d = make_daemon()
    bot, room = uniq("b")[:9], "#" + uniq("r")
    ann = await IrcClient.connect(ngircd.port, uniq("a")[:9])
    await ann.join(room)
    cfg = irc_config(d.socket, ngircd, bot, channels=[room], max_line_bytes=60)
    start_adapter(adapters, workdir, cfg).wait_connected()
    await ann.expect(lambda x: x.command == "JOIN" and x.nick == bot)

    await ann.say(bot, "hello in private")
    dm = await ann.expect(privmsg_from(bot))
    assert dm.params == [ann.nick, "hello in private"]

    said = f"{bot}: in the room, " + "word " * 25  # echoed back longer than one line
    await ann.say(room, said.strip())
    lines = [await ann.expect(privmsg_from(bot, room))]
    while " ".join(x.params[1] for x in lines) != said.strip():
        lines.append(await ann.expect(privmsg_from(bot, room)))
    assert len(lines) >= 3 and all(len(x.params[1].encode()) <= 60 for x in lines)

    rows = query(d, INBOUND, CHANNEL)
    kinds = {(r[1], r[2], r[3]) for r in rows}
    assert kinds == {("dm", ann.nick, ann.nick), ("group", room, ann.nick)}
    group_meta = next(r[4] for r in rows if r[1] == "group")
    assert '"mentioned":true' in group_meta.replace(" ", "")
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 2)
    await ann.aclose()


@pytest.mark.anyio
@asyncio_only
async def test_adapter_killed_before_the_ack_then_restarted_runs_one_turn(
    ngircd: Server, make_daemon: DaemonFactory, adapters: list[AdapterProcess], workdir: Path
) -> None:
    d = make_daemon()
    bot = uniq("b")[:9]
    ann = await IrcClient.connect(ngircd.port, uniq("a")[:9])
    cfg = irc_config(d.socket, ngircd, bot)
    first = start_adapter(adapters, workdir, cfg)
    first.wait_connected()
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)  # the broker cannot ack now
    try:
        await ann.say(bot, "only once please")
        spool = first.state_dir / "spool"

        async def spooled() -> bool:
            journal = spool / "spool.jsonl"
            return journal.exists() and "only once please" in journal.read_text()

        await wait_until(spooled, "the message in the adapter's spool")
        first.kill()
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    start_adapter(adapters, workdir, cfg).wait_connected()
    assert (await ann.expect(privmsg_from(bot))).params[1] == "only once please"
    await ann.say(bot, "sentinel")  # its reply comes after any repeat of the first
    assert (await ann.expect(privmsg_from(bot))).params[1] == "sentinel"
    replies = [x.params[1] for x in ann.seen if privmsg_from(bot)(x)]
    assert replies == ["only once please", "sentinel"]
    assert len(query(d, INBOUND, CHANNEL)) == 2
    assert query(d, "SELECT count(*) FROM turns") == [(2,)]
    await ann.aclose()


@pytest.mark.anyio
@asyncio_only
async def test_a_broker_restart_loses_nothing_and_repeats_nothing(
    ngircd: Server, make_daemon: DaemonFactory, adapters: list[AdapterProcess], workdir: Path
) -> None:
    d = make_daemon()
    bot = uniq("b")[:9]
    ann = await IrcClient.connect(ngircd.port, uniq("a")[:9])
    start_adapter(adapters, workdir, irc_config(d.socket, ngircd, bot)).wait_connected()
    await ann.say(bot, "before")
    assert (await ann.expect(privmsg_from(bot))).params[1] == "before"
    await anyio.to_thread.run_sync(d.kill)
    await ann.say(bot, "while down")
    await anyio.sleep(0.2)  # the adapter holds it; the broker is not there
    await anyio.to_thread.run_sync(d.start)
    assert (await ann.expect(privmsg_from(bot))).params[1] == "while down"
    await ann.say(bot, "after")
    assert (await ann.expect(privmsg_from(bot))).params[1] == "after"
    replies = [x.params[1] for x in ann.seen if privmsg_from(bot)(x)]
    assert replies == ["before", "while down", "after"]
    assert len(query(d, INBOUND, CHANNEL)) == 3
    await ann.aclose()


def test_a_server_that_is_down_ends_with_exit_75(
    adapters: list[AdapterProcess], workdir: Path
) -> None:
    nobody = Server("none", "127.0.0.1", free_port(), workdir, None)  # type: ignore[arg-type]
    cfg = irc_config(workdir / "no-broker.sock", nobody, "bot")  # the broker may come later
    cfg["adapter"].update(give_up_s=0.5)
    proc = start_adapter(adapters, workdir, cfg)
    assert proc.wait_exit(START_WITHIN_S) == 75
    log = proc.log()
    assert "IRC server 127.0.0.1" in log and "retrying in" in log and "giving up" in log


def test_a_refused_login_is_logged_and_ends_with_exit_75(
    adapters: list[AdapterProcess], workdir: Path
) -> None:
    (workdir / "irc-password").write_text("wrong\n")
    with start_ngircd(password="right") as locked:
        cfg = irc_config(
            workdir / "no-broker.sock", locked, "bot", password_file=str(workdir / "irc-password")
        )
        cfg["adapter"].update(give_up_s=0.5)
        proc = start_adapter(adapters, workdir, cfg)
        assert proc.wait_exit(START_WITHIN_S) == 75
    assert "login refused" in proc.log()


@pytest.mark.anyio
@asyncio_only
async def test_a_long_reply_is_paced_under_the_servers_flood_limit_and_arrives_whole(
    make_daemon: DaemonFactory, adapters: list[AdapterProcess], workdir: Path
) -> None:
    d = make_daemon()
    with start_ngircd(penalties=True) as throttled:  # ngIRCd's own flood throttle on
        bot = uniq("b")[:9]
        ann = await IrcClient.connect(throttled.port, uniq("a")[:9])
        cfg = irc_config(d.socket, throttled, bot, max_line_bytes=24, rate_per_s=4.0, burst=2)
        start_adapter(adapters, workdir, cfg).wait_connected()
        said = "pace these words over several short lines please"
        await ann.say(bot, said)
        lines = [await ann.expect(privmsg_from(bot), within=15)]
        while " ".join(x.params[1] for x in lines) != said:
            lines.append(await ann.expect(privmsg_from(bot), within=15))
        assert len(lines) == 3 and all(len(x.params[1].encode()) <= 24 for x in lines)
        await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 1)
        await ann.aclose()
