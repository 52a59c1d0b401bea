"""adapters.xmpp against a Prosody that limits: stanza errors and c2s rate limits.

The server here (the `prosody_limited` fixture) reads every client stream at
2 kB/s (mod_limits) and answers the bot's messages marked
"[bounce:<type>:<condition>:<n>]" with that stanza error the first n times
(tests/realservers/prosody_modules/mod_test_bounce.lua), as a rate-limited
room or server would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from slixmpp import Message

from tests.conftest import DaemonFactory
from tests.integration.wire import uniq, wait_db, wait_until
from tests.realservers.processes import AdapterProcess
from tests.realservers.servers import Server
from tests.realservers.test_xmpp import BOT, start_adapter, xmpp_config
from tests.realservers.xmpp_client import XmppPerson

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

LIMIT_BYTES_PER_S = 2000  # conftest.LIMITED_PROSODY
DELIVERED = "SELECT count(*) FROM outbox WHERE status = 'delivered'"


@pytest.fixture
async def ann(prosody_limited: Server) -> Any:
    person = await XmppPerson(prosody_limited, "ann").start()
    yield person
    await person.close()


def from_bot(body: str) -> Callable[[Message], bool]:
    return lambda m: str(m["from"]).startswith(BOT) and m["body"] == body


def bot_bodies(person: XmppPerson) -> list[str]:
    return [str(m["body"]) for m in person.seen if str(m["from"]).startswith(BOT)]


def bot_replies(person: XmppPerson) -> list[str]:
    """The bot's messages as shown once corrected (XEP-0308): a reply still
    streaming after a second goes out as a message, then as its correction."""
    shown: dict[str, str] = {}
    for msg in person.seen:
        if str(msg["from"]).startswith(BOT):
            corrected = str(msg["replace"]["id"])
            if corrected in shown:
                shown[corrected] = str(msg["body"])
            else:
                shown[str(msg["id"])] = str(msg["body"])
    return list(shown.values())


@pytest.mark.slow  # ~8 s: every stream on this server is read at 2 kB/s
async def test_a_wait_error_backs_off_and_sends_again_once(
    prosody_limited: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    room = f"{uniq('room').lower()}@conference.localhost"
    await ann.join(room, "ann")
    config = xmpp_config(d.socket, prosody_limited, short_tmp, rooms=[room])
    proc = start_adapter(adapters, short_tmp, config)

    dm_text = f"{uniq('dm')} [bounce:wait:resource-constraint:2]"
    ann.say(BOT, dm_text)
    await ann.expect(from_bot(dm_text))
    room_text = f"agentbot: {uniq('room')} [bounce:wait:policy-violation:1]"
    ann.say(room, room_text, group=True)
    await ann.expect(lambda m: str(m["from"]) == f"{room}/agentbot" and m["body"] == room_text)

    await wait_db(d, DELIVERED, (), 2)
    await anyio.sleep(0.3)  # a duplicate would be on its way by now
    assert bot_bodies(ann).count(dm_text) == 1
    replies = [str(m["body"]) for m in ann.seen if str(m["from"]) == f"{room}/agentbot"]
    assert replies == [room_text]
    log = proc.log()
    assert log.count("wait/resource-constraint (test bounce); sending again") == 2
    assert log.count("wait/policy-violation (test bounce); sending again") == 1


async def test_any_other_stanza_error_is_undeliverable_and_the_next_reply_goes_out(
    prosody_limited: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    proc = start_adapter(adapters, short_tmp, xmpp_config(d.socket, prosody_limited, short_tmp))

    refused = f"{uniq('dm')} [bounce:cancel:not-allowed:1]"
    ann.say(BOT, refused)
    undeliverable = "cancel/not-allowed (test bounce); undeliverable"

    async def logged() -> bool:
        return undeliverable in proc.log()

    await wait_until(logged, "the refused reply logged")
    after = uniq("after")
    ann.say(BOT, after)
    await ann.expect(from_bot(after))
    assert refused not in bot_bodies(ann)  # refused for good: never sent again
    # Confirmed (as undeliverable), so the broker does not hold it for ever.
    await wait_db(d, DELIVERED, (), 2)


@pytest.mark.slow  # ~8 s: every stream on this server is read at 2 kB/s
async def test_a_burst_under_the_c2s_rate_limit_loses_and_reorders_no_reply(
    prosody_limited: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    # Collect: messages that arrive during a turn go to the next one, none
    # interrupts it (an interrupted turn's partial reply is the broker's choice).
    d = make_daemon({"queue": {"person_mode": "collect"}})
    start_adapter(adapters, short_tmp, xmpp_config(d.socket, prosody_limited, short_tmp))
    # ~4 kB of replies, twice what the server reads from the bot in a second.
    texts = [f"burst {n:02d} {uniq('b')} " + "x" * 200 for n in range(16)]
    started = anyio.current_time()
    for text in texts:
        ann.say(BOT, text)
    # Messages that arrive during a turn may share the next one: the echo
    # engine joins their texts with newlines. In order, each exactly once.
    with anyio.fail_after(30):
        while True:
            lines = [line for body in bot_replies(ann) for line in body.split("\n")]
            if len(lines) >= len(texts) and lines[-1] == texts[-1]:
                break
            await anyio.sleep(0.05)
    assert lines == texts
    # The limit did pace the streams: unlimited, this takes ~0.1 s here.
    sent_bytes = sum(len(text) + 100 for text in texts)  # 100: the stanza around it
    assert anyio.current_time() - started > sent_bytes / LIMIT_BYTES_PER_S
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status != 'delivered'", (), 0)
