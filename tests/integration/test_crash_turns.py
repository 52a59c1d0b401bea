"""Kill -9 the daemon while turns run under load; after a restart nothing is lost or run twice.

Adapters push random bursts in every queue mode to many sessions whose echo
turns take ~100 ms. After a random number of `deliver` frames the daemon gets
SIGKILL. The items the ledger shows `running` at that moment are the turns cut
off. After a restart the adapters reconnect, send again everything that was not
acked (the broker answers `duplicate` for what it had stored) and confirm every
deliver, including the ones resent. Once quiescent the ledger must show:

- each turn cut off by the crash as an aborted turn (reason `crash`) with
  exactly the items that were running, which ran again afterwards;
- every acked message in exactly one completed turn (crash and interrupt
  aborts are the only extra attempts), in arrival order within its session,
  on one unforked thread of turns that never overlapped;
- no item left `running` or `queued`, every reply delivered.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from tests import ledger_checks as lc
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.test_concurrency import (
    CHANNEL,
    CLIENT_BACKEND,
    CONNECTIONS,
    Fleet,
    Msg,
    check_delivers,
    drive,
    make_bursts,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SENDERS = 80
MESSAGES = 800
CONFIG = {
    "log_level": "warning",
    "max_inflight": 1024,
    "engine": {"kind": "echo", "delay_ms": 25, "chunks": 4},
    "queue": {"debounce_ms": 20, "cap": 100_000, "drop": "old", "idle_stop_s": 2.0},
}
# (seed, kills); BROKER_CRASH_SEEDS=1,2,3 runs other seeds, each with one to three kills.
_SEEDS = [int(s) for s in os.environ.get("BROKER_CRASH_SEEDS", "11,22,33").split(",")]
SCENARIOS = [(seed, 1 + n % 3) for n, seed in enumerate(_SEEDS)]
DISCONNECTED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass
class CrashRun:
    """One scenario: rounds of traffic each ended by SIGKILL, then a last round to the end."""

    daemon: DaemonProcess
    rng: random.Random
    bursts: list[list[Msg]]
    delivers: dict[str, dict[str, Any]] = field(default_factory=dict)  # over all rounds
    repeats: Counter[str] = field(default_factory=Counter)
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)
    cut_off: dict[str, list[str]] = field(default_factory=dict)  # turn id -> items, all kills
    stored: set[str] = field(default_factory=set)  # msg_ids in the ledger at the last kill
    wrong_duplicate: list[str] = field(default_factory=list)

    def fleet(self) -> Fleet:
        return Fleet(self.daemon, delivers=self.delivers, repeats=self.repeats)

    def unacked(self) -> list[list[Msg]]:
        bursts = [[m for m in b if m.msg_id not in self.acked] for b in self.bursts]
        return [b for b in bursts if b]

    def took(self, fleet: Fleet) -> None:
        """Merge a round's acks; sent again, a message is a duplicate iff it was stored."""
        self.wrong_duplicate += [
            m for m, a in fleet.acked.items() if a["duplicate"] != (m in self.stored)
        ]
        self.acked.update(fleet.acked)

    async def until_killed(self, more_delivers: int) -> None:
        """Send what is not acked yet; SIGKILL the daemon after `more_delivers` delivers."""
        fleet, target = self.fleet(), len(self.delivers) + more_delivers
        pid = self.daemon.proc.pid if self.daemon.proc is not None else 0

        def on_deliver(count: int) -> None:
            if count == target:
                os.kill(pid, signal.SIGKILL)

        fleet.on_deliver = on_deliver
        first_round = not self.stored
        with anyio.fail_after(60):
            try:
                async with anyio.create_task_group() as tg:
                    await fleet.connect(tg, CONNECTIONS)
                    pause = 0.05 if first_round else 0.0
                    await drive(fleet, self.rng, self.unacked(), max_pause_s=pause)
                    await anyio.sleep_forever()  # until the kill breaks the connections
            except* DISCONNECTED:
                pass
        await fleet.close()
        assert self.daemon.proc is not None
        assert self.daemon.proc.wait(10) == -signal.SIGKILL
        assert len(self.delivers) >= target
        self.took(fleet)
        running, self.stored = after_kill(self.daemon)
        assert running, "the kill must land while turns run"
        assert set(self.acked) <= self.stored, "an acked message was lost"
        self.cut_off.update(running)

    async def to_the_end(self) -> None:
        """Send what is not acked, confirm every deliver until quiescent."""
        fleet = self.fleet()
        unacked = self.unacked()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                await fleet.connect(tg, CONNECTIONS)
                await drive(fleet, self.rng, unacked, max_pause_s=0)
                await fleet.wait_answered(sum(len(b) for b in unacked))
                left = await lc.wait_quiescent(self.daemon.db, within_s=40)
                tg.cancel_scope.cancel()
        await fleet.close()
        assert not fleet.errors, fleet.errors[:5]
        assert left == (0, 0, 0), f"not quiescent: (open, running, pending replies) = {left}"
        self.took(fleet)


def after_kill(daemon: DaemonProcess) -> tuple[dict[str, list[str]], set[str]]:
    """What the ledger holds after a kill: the turns running then (turn id -> its items
    in seq order) and the msg_ids stored."""
    with daemon.db() as conn:
        rows = conn.execute(
            "SELECT turn_id, id FROM queue_items WHERE status = 'running' ORDER BY seq"
        ).fetchall()
        stored = {r[0] for r in conn.execute("SELECT msg_id FROM inbound")}
    conn.close()
    running: dict[str, list[str]] = {}
    for turn_id, item_id in rows:
        running.setdefault(turn_id, []).append(item_id)
    return running, stored


def check_crash_turns(view: lc.LedgerView, running: dict[str, list[str]]) -> list[str]:
    """Each turn cut off is recorded aborted:crash with its items; no other crash turns."""
    crash = {t.id: view.inputs[t.id] for t in view.turns.values() if t.reason == "crash"}
    problems = [
        f"crash turn {t} is {view.turns[t].status}"
        for t in crash
        if view.turns[t].status != "aborted"
    ]
    by_inputs = Counter(tuple(items) for items in crash.values())
    for turn_id, items in running.items():
        if turn_id in crash and crash[turn_id] != items:
            problems.append(f"crash turn {turn_id} has inputs {crash[turn_id]}, ran {items}")
        elif turn_id not in crash and by_inputs[tuple(items)] == 0:
            problems.append(f"turn {turn_id} cut off with {items} left no crash turn")
    if len(crash) != len(running):
        problems.append(f"{len(crash)} crash turns for {len(running)} turns cut off")
    return problems


@pytest.mark.parametrize("anyio_backend", CLIENT_BACKEND)
@pytest.mark.parametrize(("seed", "kills"), SCENARIOS)
async def test_kill9_mid_turn_runs_every_message_once(
    make_daemon: DaemonFactory, seed: int, kills: int
) -> None:
    rng = random.Random(seed)
    bursts = make_bursts(rng, SENDERS, MESSAGES, per_session=4)
    texts = {m.msg_id: m.text for b in bursts for m in b}
    kill_after = [rng.randrange(40, 200)] + [rng.randrange(10, 40) for _ in range(kills - 1)]
    print(f"seed {seed}: {len(texts)} messages, kill after {kill_after} more delivers")
    run = CrashRun(make_daemon(CONFIG, name=f"crash{seed}"), rng, bursts)
    for more in kill_after:
        await run.until_killed(more)
        run.daemon.start()
    await run.to_the_end()

    assert set(run.acked) == set(texts)
    assert not run.wrong_duplicate, f"duplicate must answer what was stored: {run.wrong_duplicate}"
    with run.daemon.db() as conn:
        view = lc.load(conn)
    conn.close()
    kinds = view.turn_counts()
    print(f"cut off {len(run.cut_off)}, turns {dict(kinds)}, repeats {run.repeats.total()}")
    allowed = frozenset({"completed", "aborted:interrupt", "aborted:crash"})
    fleet = run.fleet()  # holds every deliver of every round
    for name, problems in (
        ("turn kinds", lc.check_turn_kinds(view, allowed)),
        ("crash turns", check_crash_turns(view, run.cut_off)),
        ("serial turns / one thread", lc.check_serial_turns(view)),
        ("no overlapping turns", lc.check_no_overlap(view)),
        ("fates", lc.check_fates(view, [(CHANNEL, m) for m in run.acked])),
        ("arrival order", lc.check_arrival_order(view)),
        ("outbox", lc.check_outbox(view, no_reply_reasons=frozenset({"crash"}))),
        ("delivers", check_delivers(view, fleet, texts)),
    ):
        assert not problems, f"{name}: {len(problems)} violation(s), first: {problems[:5]}"
    assert view.status_counts() == Counter({"done": len(texts)})
