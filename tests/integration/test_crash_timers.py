"""Kill -9 the daemon while recurring timers fire under message load; after each
restart no firing is lost and none is doubled.

Seven timers (every_s = 1) on three system sessions and two person sessions,
while an adapter sends a message every 30 ms to the person sessions. The daemon
gets SIGKILL three times at random moments and stays down a random while. Then
the timers are cancelled and the daemon left to finish its queue, and the
ledger must show, for every timer:

- its firings `timer:<id>:1..n` each exactly once, n being the timer's count,
  with one queue item each and due times on the timer's grid, rising (with
  gaps where due times missed while the daemon was down fired as one);
- each firing's item done, in exactly one completed turn.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]

CONFIG = {
    "log_level": "warning",
    "engine": {"kind": "echo", "delay_ms": 20, "chunks": 2},
    "queue": {"idle_stop_s": 2.0},
}
KILLS = 3
DISCONNECTED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def rows(d: DaemonProcess, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with d.db() as db:
        return db.execute(sql, args).fetchall()


async def op(d: DaemonProcess, name: str, **args: Any) -> Any:
    async with await BrokerClient.connect(d.socket) as c:
        return await c.op(name, **args)


async def send_load(d: DaemonProcess, senders: list[str], stop: anyio.Event) -> None:
    """Messages to the person sessions until `stop`, through kills and restarts."""
    n = 0
    while not stop.is_set():
        try:
            async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
                while not stop.is_set():
                    n += 1
                    await c.send(
                        {
                            "type": "inbound",
                            "req": str(n),
                            "msg_id": f"load-{n}",
                            "sender_id": senders[n % len(senders)],
                            "peer_kind": "dm",
                            "text": f"message {n}",
                            "queue_mode": "followup",
                        }
                    )
                    await anyio.sleep(0.03)
        except DISCONNECTED:
            await anyio.sleep(0.05)  # the daemon is down: try again shortly


async def test_recurring_timers_fire_exactly_once_per_due_time_across_kills(
    make_daemon: DaemonFactory,
) -> None:
    rng = random.Random(26)
    d = make_daemon(CONFIG)
    senders = ["+100", "+200"]
    persons = []
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for sender in senders:
            await c.send(
                {
                    "type": "inbound",
                    "req": sender,
                    "msg_id": f"first-{sender}",
                    "sender_id": sender,
                    "peer_kind": "dm",
                    "text": "hi",
                }
            )
            with anyio.fail_after(10):
                while (frame := await c.recv())["type"] != "ack":
                    pass
            persons.append(frame["session"])
    owners = ["system:a", "system:a", "system:b", "system:c", *persons, persons[0]]
    timers = [
        (await op(d, "timer.add", session=s, text=f"beat {k}", in_s=0.1 * k, every_s=1))["timer"]
        for k, s in enumerate(owners)
    ]
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_load, d, senders, stop)
        for _ in range(KILLS):
            await anyio.sleep(rng.uniform(1.0, 2.2))
            d.kill()
            await anyio.sleep(rng.uniform(0.0, 1.5))
            d.start()
        await anyio.sleep(1.5)
        stop.set()
    for timer in timers:
        await op(d, "timer.cancel", timer=timer)
    with anyio.fail_after(20):
        while rows(d, "SELECT 1 FROM queue_items WHERE status IN ('queued', 'running') LIMIT 1"):  # noqa: ASYNC110
            await anyio.sleep(0.1)

    total, collapsed = 0, 0
    for timer in timers:
        ((fired, first_at, every_ms),) = rows(
            d, "SELECT fired, first_at, every_ms FROM timers WHERE id = ?", timer
        )
        firings = rows(
            d,
            "SELECT msg_id, n, due_at, item_id FROM timer_firings WHERE timer_id = ? ORDER BY n",
            timer,
        )
        assert fired >= 2, f"{timer} fired {fired} times in about {KILLS * 3} s"
        assert [f[0] for f in firings] == [f"timer:{timer}:{n}" for n in range(1, fired + 1)]
        dues = [f[2] for f in firings]
        assert dues == sorted(set(dues)) and all((due - first_at) % every_ms == 0 for due in dues)
        collapsed += sum(1 for a, b in itertools.pairwise(dues) if b - a > every_ms)
        for msg_id, _, _, item_id in firings:
            items = rows(
                d,
                "SELECT id, status, payload FROM queue_items WHERE source = 'timer'"
                " AND json_extract(payload, '$.msg_id') = ?",
                msg_id,
            )
            assert [(i[0], i[1]) for i in items] == [(item_id, "done")], msg_id
            assert orjson.loads(items[0][2])["timer"] == timer
            completed = rows(
                d,
                "SELECT DISTINCT t.id FROM messages m JOIN turns t ON t.id = m.turn_id"
                " WHERE m.item_id = ? AND t.status = 'completed'",
                item_id,
            )
            assert len(completed) == 1, (msg_id, completed)
        total += fired
    # The kills did cost due times: some firings stand for several (fired once at start).
    assert collapsed > 0
    assert rows(d, "SELECT count(*) FROM timer_firings") == [(total,)]
    assert rows(d, "SELECT count(*) FROM queue_items WHERE source = 'timer'") == [(total,)]
    assert rows(d, "SELECT count(*) FROM inbound") > [(10,)]  # the load did run
