"""A timer's item is named `timer:<timer>:<n>` (PROTOCOL.md, round 2), and the
turn it runs in lists that name among its inputs in `session.show`, as a turn
lists the msg_ids of the messages it took."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import DaemonProcess
from tests.integration.wire import Adapter, op, running_daemon, show, uniq, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    with running_daemon({"queue": {"debounce_ms": 0}}) as d:
        yield d


async def test_a_timers_turn_lists_the_timers_msg_id(daemon: DaemonProcess) -> None:
    async with await Adapter.connect(daemon, uniq("c")) as adapter:
        first = uniq("m")
        ack = await adapter.send_inbound(first, "hello", uniq("p"))
        session = ack["session"]
        await adapter.deliver(msg_id=first)
        timer = (await op(daemon, "timer.add", session=session, text="ring", in_s=0.05))["timer"]
        ring = await adapter.deliver(session=session)  # its reply comes here

        async def two_turns() -> bool:
            return len((await show(daemon, session))["turns"]) >= 2

        await wait_until(two_turns, "the timer's turn")
    turns = (await show(daemon, session))["turns"]
    assert ring["text"].lower() == "ring"
    assert [t["inputs"] for t in turns] == [[first], [f"timer:{timer}:1"]]
