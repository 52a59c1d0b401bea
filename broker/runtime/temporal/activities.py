"""The activities of a session workflow: a turn, chat commands, dropped items.

A turn runs on whichever node's worker picked the activity up, through the same
actor code as the local runtime (`broker/mailbox/actor.py`): a `OneTurnActor`
given exactly the items the workflow's queue machine chose. Inside it the
turn-lifecycle machine (`core.lifecycle`) decides the turn's own steps
(compaction first, a reactive compaction, progress saves) as it does locally;
the queue decisions between turns are the workflow's.

The ledger decides what may run: items it no longer holds open (done, dropped,
cancelled) are skipped, so a retried activity or a signal sent twice never runs a
finished item again, and a retry after a node died first records that node's cut-off
turn as aborted (crash), as a restart does. An interrupt aborts the turn with the
workflow's reason, and the activity returns only once the abort is committed, so the
next turn cannot overlap it. A turn that failed every attempt runs its items once more
through the same actor with an engine that fails at once (failed_turn.py): recorded
failed, the person told, the items consumed, as when a local turn's engine fails.

A turn, and chat commands run between turns, run only while their attempt holds the
session's lease (session_lease.py): a retry waits for a silent attempt's lease to
lapse, and an attempt that lost it is cut off where it stands, engine call and all,
so two attempts of one turn never run at once. An attempt the server no longer holds
writes nothing either: one that reaches its node a heartbeat timeout after the server
started it (a poll answered while its node was paused) does not run, and one
cancelled because the server timed it out is cut off as by a lost lease, not aborted.

The activity heartbeats every 0.2 s from the moment it holds its session's lease to its
end (session_lease.py), chat commands run between turns too: their waits on a busy
node (the ledger's writes and reads, room in its queue of writes) are slow, not dead.
The workflow's news for the turn (steered items, an abort, chat commands the turn's
actor answers) is pushed to it when it runs on the workflow's node
(live_turns.py), and asked for with the `control` query every `QUERY_EVERY_S`
otherwise; steering goes through the workflow, not the ledger. A turn that ended
without an error leaves its actor's context to the node
(broker/mailbox/warm_threads.py).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import orjson
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from broker.mailbox.actor import Posted, SessionActor
from broker.mailbox.ports import ActorPorts
from broker.mailbox.registry import Mailboxes
from broker.mailbox.warm_threads import WarmThreads
from broker.runtime.temporal.control import Control, ControlPush
from broker.runtime.temporal.failed_turn import failing_ports, failure_text
from broker.runtime.temporal.live_turns import QUERY_EVERY_S, LiveTurn, LiveTurns
from broker.runtime.temporal.session_lease import LeaseLost, SessionLease, lease_ttl_s
from broker.runtime.temporal.session_records import (
    CONTROL_QUERY,
    DROP_ITEMS,
    FAIL_ITEMS,
    LEASE_LOST,
    NODE_STOPPING,
    PUSH_CONTROL,
    RUN_COMMANDS,
    RUN_ITEMS,
    SESSION_QUEUE,
    STALE_ATTEMPT,
    Drops,
    FailedTurn,
    QueueSetup,
    TurnOrder,
    TurnResult,
)
from core import lifecycle as lc
from core import queue_machine as m
from ledger.port.records import ItemInfo
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.runtime.temporal")
POLL_S = 0.2
OPEN = frozenset({"queued", "running"})


def item_from_record(record: list[Any]) -> ItemInfo:
    return ItemInfo(*record)


class OneTurnActor(SessionActor):
    """A session actor that runs the one turn it is given, then stops opening turns."""

    # Its attempt's lease taking, a write waited for, came after every write this node
    # had submitted (an earlier actor's among them): nothing to wait for.
    settle_first = False

    def __init__(self, label: str, ports: ActorPorts, noted: list[ItemInfo]) -> None:
        super().__init__(label, ports)
        self.noted = noted  # dropped under "summarize": this turn's note names them
        self.ended = anyio.Event()
        self.looping = anyio.Event()  # loaded, its recovered commands handled
        self.waiting_behind = 0  # items the workflow holds behind this turn
        self.result = TurnResult("failed")

    @property
    def backlog(self) -> int:
        return super().backlog + self.waiting_behind

    async def _loop(self) -> None:
        self.looping.set()
        await super()._loop()

    def _apply(self, event: lc.Event) -> None:
        if isinstance(event, m.Resume) and self.noted:  # the workflow's machine dropped them
            self.items.update((i.id, i) for i in self.noted)
            note = tuple(self._machine_item(i) for i in self.noted)
            self.state = self.state._replace(queue=self.state.queue._replace(dropped_note=note))
            self.noted = []
        super()._apply(event)

    def post(self, event: Posted) -> None:
        if isinstance(event, lc.TurnCommitted):
            # Items steered and not taken go back to the workflow's queue, not this one's.
            self._apply(lc.Drain())
            self.result = TurnResult(event.outcome, list(event.steer_taken))
            self.ended.set()
        super().post(event)


class Activities:
    """The node's activities; they share its ledger, engines and adapters' connections."""

    def __init__(self, mailboxes: Mailboxes, client: Client) -> None:
        self.mailboxes = mailboxes
        self.client = client
        self.warm = mailboxes.ports.warm = WarmThreads()
        self.live = LiveTurns()

    def all(self) -> list[Any]:
        return [
            self.session_queue,
            self.run_items,
            self.run_commands,
            self.drop_items,
            self.fail_items,
            self.push_control,
        ]

    @activity.defn(name=SESSION_QUEUE)
    async def session_queue(self, label: str) -> QueueSetup:
        """The session's queue limits: the config's, under its `/queue` override (read
        alone: the session's start would load its whole thread, at every run's start)."""
        await self.mailboxes.ledger.settled()
        stored = await self.mailboxes.ledger.queue_override(label)
        override = orjson.loads(stored) if stored else {}
        q = self.mailboxes.settings.queue
        return QueueSetup(
            override.get("debounce_ms", q.debounce_ms) / 1000,
            override.get("cap", q.cap),
            override.get("drop", q.drop),
            override.get("mode"),
        )

    async def _open_records(
        self, order: TurnOrder, after_a_failure: bool = False
    ) -> list[ItemInfo]:
        ledger = self.mailboxes.ledger
        if after_a_failure or activity.info().attempt > 1:  # the cut-off turn first
            recovered = await ledger.recover_crashed(now_ms(), session=order.label)
            if recovered:
                log.warning(
                    "turns cut off by a crash recorded as aborted",
                    turns=len(recovered),
                    session=order.label,
                )
        # No `settled()` first: the lease's taking, a write waited for, committed after
        # every write this node had submitted before it (the writer resolves in order).
        held = {i.id: i for i in await ledger.open_items(order.label)}
        wanted = [item_from_record(r) for r in order.records]
        return [held[i.id]._replace(mode=i.mode) for i in wanted if i.id in held]

    @activity.defn(name=RUN_ITEMS)
    async def run_items(self, order: TurnOrder) -> TurnResult:
        return await self._run_turn(order, self.mailboxes.ports, after_a_failure=False)

    @activity.defn(name=FAIL_ITEMS)
    async def fail_items(self, failed: FailedTurn) -> TurnResult:
        """The turn whose activity failed every attempt, run once more with an
        engine that fails at once: recorded failed, the person told, items consumed."""
        ports = failing_ports(self.mailboxes.ports, failure_text(failed.kind))
        return await self._run_turn(failed.order, ports, after_a_failure=True)

    def _lease(self, label: str) -> SessionLease:
        """This attempt's hold on the session's lease (session_lease.py)."""
        info = activity.info()
        settings = self.mailboxes.settings
        return SessionLease(
            self.mailboxes.ledger,
            label,
            f"{settings.node_id}/{info.activity_id}#{info.attempt}",
            lease_ttl_s(settings.runtime.heartbeat_timeout_s),
            activity.heartbeat,
        )

    async def _run_turn(
        self, order: TurnOrder, ports: ActorPorts, *, after_a_failure: bool
    ) -> TurnResult:
        if self.mailboxes.draining:  # this node stops: another one, or its restart, runs it
            raise ApplicationError("the node is stopping", type=NODE_STOPPING)
        refuse_stale(self.mailboxes.settings.runtime.heartbeat_timeout_s)
        lease = self._lease(order.label)
        try:
            return await lease.run(lambda: self._leased_turn(order, ports, after_a_failure, lease))
        except LeaseLost as exc:  # cut off: the next attempt records it as a crash
            raise ApplicationError(str(exc), type=LEASE_LOST) from None

    async def _leased_turn(
        self, order: TurnOrder, ports: ActorPorts, after_a_failure: bool, lease: SessionLease
    ) -> TurnResult:
        items = await self._open_records(order, after_a_failure)
        if not items:
            return TurnResult("completed")  # all done already
        if len(items) > 1:  # one turn of them all, as the workflow's machine decided
            items = [i._replace(mode="collect") for i in items]
        noted = [item_from_record(r) for r in order.noted]
        actor = OneTurnActor(order.label, ports, noted)
        self.mailboxes.actors[order.label] = actor
        try:
            result = await self._run(actor, order, items, lease)
        finally:
            if self.mailboxes.actors.get(order.label) is actor:
                del self.mailboxes.actors[order.label]
        # Ended without an error: its facts are what the ledger committed, kept for the
        # session's next turn on this node (warm_threads.py).
        head = actor.facts.head
        if actor.looping.is_set() and head is not None:
            self.warm.keep(order.label, head, actor.facts.ctx)
        return result

    @activity.defn(name=PUSH_CONTROL)
    async def push_control(self, push: ControlPush) -> bool:
        """A local activity: the workflow's news, to its turn if it runs here."""
        return self.live.push(push.label, push.turn_no, push.control)

    async def _run(
        self, actor: OneTurnActor, order: TurnOrder, items: list[ItemInfo], lease: SessionLease
    ) -> TurnResult:
        with self.live.running(order.label, order.turn_no) as live:
            return await self._run_live(actor, order, items, live, lease)

    async def _run_live(
        self,
        actor: OneTurnActor,
        order: TurnOrder,
        items: list[ItemInfo],
        live: LiveTurn,
        lease: SessionLease,
    ) -> TurnResult:
        handle = self.client.get_workflow_handle(order.label)
        steered: set[str] = set()
        commanded: list[str] = []
        asked = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(actor.run, items)
            tg.start_soon(_wake_when_ended, actor, live)
            try:
                while not actor.ended.is_set():
                    with anyio.move_on_after(POLL_S):
                        await live.wake.wait()
                    control = live.take()
                    if actor.ended.is_set():
                        break
                    if actor._live and actor.turn is None and actor.state.quiet:
                        actor.result = TurnResult("completed")  # nothing of it could run
                        break
                    if control is None and anyio.current_time() - asked >= QUERY_EVERY_S:
                        asked = anyio.current_time()
                        control = await self._control(handle, order.turn_no)
                    if control is not None:
                        actor.waiting_behind = control.waiting
                        self._steer(actor, control, steered)
                        self._commands(actor, control, commanded)
                        turn = actor.turn
                        if control.abort and turn is not None and turn.abort_reason is None:
                            # Sooner than the cancellation, which waits for a heartbeat
                            # to be sent (throttled by the SDK).
                            turn.abort(control.abort)
            except anyio.get_cancelled_exc_class():
                if not lease.lost and not superseded():  # else cut off, nothing written
                    with anyio.CancelScope(shield=True):
                        await self._abort(actor, handle, order.turn_no, live.latest)
                tg.cancel_scope.cancel()
                raise
            tg.cancel_scope.cancel()
        actor.result.commands_taken = commanded
        if actor.result.outcome == "aborted" and self.mailboxes.draining:
            # This node stops: the turn was aborted (`shutdown`) and its items went back
            # to the queue; another node, or this one restarted, runs them again.
            raise ApplicationError("the node stopped during the turn", type=NODE_STOPPING)
        return actor.result

    async def _control(self, handle: Any, turn_no: int) -> Control | None:
        try:
            with anyio.fail_after(POLL_S * 5):
                control: Control = await handle.query(CONTROL_QUERY, turn_no, result_type=Control)
                return control
        except Exception as exc:  # the turn goes on; the next beat asks again
            log.debug("control query failed", error=str(exc))
            return None

    def _steer(self, actor: OneTurnActor, control: Control, steered: set[str]) -> None:
        for record in control.steer:
            item = item_from_record(record)
            if item.id not in steered:
                steered.add(item.id)
                actor.post(item._replace(mode="steer"))

    def _commands(self, actor: OneTurnActor, control: Control, taken: list[str]) -> None:
        for record in control.commands:
            item = item_from_record(record)
            if item.id not in taken and actor.turn is not None:
                taken.append(item.id)
                actor.post(item)  # the actor answers it (actor.py `_arrived`)

    async def _abort(
        self, actor: OneTurnActor, handle: Any, turn_no: int, pushed: Control | None
    ) -> None:
        """Abort with the workflow's reason, and wait for the commit."""
        control = pushed if pushed is not None and pushed.abort else None
        if control is None:
            control = await self._control(handle, turn_no)
        reason = control.abort if control is not None and control.abort else "interrupt"
        turn = actor.turn
        if turn is None:
            return  # not begun, or committed already
        turn.abort(reason)
        with anyio.move_on_after(self.mailboxes.settings.engine.timeout_s):
            await actor.ended.wait()

    @activity.defn(name=RUN_COMMANDS)
    async def run_commands(self, order: TurnOrder) -> QueueSetup:
        refuse_stale(self.mailboxes.settings.runtime.heartbeat_timeout_s)
        try:
            return await self._lease(order.label).run(lambda: self._leased_commands(order))
        except LeaseLost as exc:
            raise ApplicationError(str(exc), type=LEASE_LOST) from None

    async def _leased_commands(self, order: TurnOrder) -> QueueSetup:
        items = await self._open_records(order)
        if not items:
            return await self.session_queue(order.label)
        actor = OneTurnActor(order.label, self.mailboxes.ports, [])
        async with anyio.create_task_group() as tg:  # heartbeating: the lease beats
            tg.start_soon(actor.run, items)  # it runs the commands first (actor.run)
            await actor.looping.wait()
            await self.mailboxes.ledger.settled()
            tg.cancel_scope.cancel()
        return await self.session_queue(order.label)

    @activity.defn(name=DROP_ITEMS)
    async def drop_items(self, drops: Drops) -> None:
        ports = self.mailboxes.ports
        for item_id, reason in drops.drops:
            await ports.admit()  # room first (actor.py); overloaded: Temporal retries
            ports.drop_item(drops.label, item_id, reason, None)
        await self.mailboxes.ledger.settled()


def refuse_stale(heartbeat_timeout_s: float) -> None:
    """An attempt the server started a heartbeat timeout ago or more, before any beat of
    it could leave this node (a poll answered while the node was paused), is one the
    server has given up: it must not run. The clocks are assumed to agree (as for
    the lease): one a little ahead refuses an attempt that had little time left."""
    age_s = time.time() - activity.info().started_time.timestamp()
    if age_s >= heartbeat_timeout_s:
        log.warning("an attempt reached this node too late to run", late_s=round(age_s, 2))
        raise ApplicationError("the attempt was given up by the server", type=STALE_ATTEMPT)


def superseded() -> bool:
    """This attempt was cancelled because the server no longer holds it (timed out,
    so another attempt runs the turn): it ends as one that lost its lease."""
    details = activity.cancellation_details()
    return details is not None and (details.not_found or details.timed_out)


async def _wake_when_ended(actor: OneTurnActor, live: LiveTurn) -> None:
    await actor.ended.wait()
    live.wake.set()
