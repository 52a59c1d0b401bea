"""The registry of live mailbox actors.

At most one actor per session label: an actor is started when its session gets work
and retires itself after an idle period, leaving the registry in the same step in
which it finds itself idle, so a new item after that starts a fresh actor and two
never overlap. Every actor runs in the daemon's actor task group; none outlives it. At
start, turns cut off by a crash are recorded as aborted and their items re-queued, and
every waiting item is handed to its actor, before the socket accepts new work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from broker.config import Settings
from broker.context import TokenCounter
from broker.deliveries import Deliveries
from broker.engines.base import Engine
from broker.mailbox.actor import SessionActor
from broker.mailbox.commands import CompactRequest
from broker.mailbox.restarts import (
    MAX_ACTOR_RESTARTS as MAX_ACTOR_RESTARTS,  # its old home, for importers
)
from broker.mailbox.restarts import ActorRestarts, stopped_by_storage
from broker.mailbox.session_facts import SessionFacts
from broker.mailbox.session_ports import SessionPorts
from broker.mailbox.thread_start import ThreadRequest
from broker.mailbox.turn_commit import TurnCommits
from broker.mcp.tools import McpTools
from broker.router import Router
from core import queue_machine as m
from ledger.port.errors import LedgerWriteFailed, WriterClosed
from ledger.port.protocols import LedgerPort
from ledger.port.records import (
    Accepted,
    Dispatched,
    Handoff,
    InboundRecord,
    ItemInfo,
    Limits,
    MergeResult,
    Reaching,
    Route,
)
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.mailboxes")
SWEEP_S = 5.0
SHUTDOWN_COMMIT_S = 10.0  # for the commits of turns aborted at shutdown


class Mailboxes:
    def __init__(
        self,
        settings: Settings,
        ledger: LedgerPort,
        engine: Engine,
        router: Router,
        deliveries: Deliveries,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.actors: dict[str, SessionActor] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.started_actors = 0
        self._restarts = ActorRestarts()  # restarts.py
        self.draining = False
        # The timer wheel's `changed` (the daemon sets it): a tool added a timer.
        self.timers_changed: Callable[[], None] = lambda: None
        # Another runtime's hand-off of an item (broker/runtime/): set, no local actor
        # starts for an item; the runtime runs it (the actors here run its turns).
        self.forward: Callable[[ItemInfo], None] | None = None
        self.mcp: McpTools | None = None  # [[mcp.servers]]' tools (the daemon sets it)
        self.router = router
        commits = TurnCommits(ledger, deliveries, self.post)
        # What the actors see of the daemon; `self` is what the tools see (broker/tools/table.py).
        self.ports = SessionPorts(
            settings, ledger, engine, router, deliveries, commits, self, self.retire
        )
        self.ports.chat.merged = self.merged

    @property
    def counter(self) -> TokenCounter:
        return self.ports.counter

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the actors; rehydrate the backlog before reporting started."""
        async with anyio.create_task_group() as tg:
            self._tg = self.ports.chat.tg = tg
            await self._rehydrate()
            task_status.started()
            await self._sweep_dispatches_forever()

    async def _sweep_dispatches_forever(self) -> None:
        """End dispatches past their deadline (their workers timed out)."""
        while True:
            await anyio.sleep(min(SWEEP_S, self.settings.workers.timeout_s / 4))
            try:
                results = await self.ledger.sweep_worker_timeouts(now_ms())
            except LedgerWriteFailed as exc:
                log.error("could not time out overdue workers", error=str(exc))
                continue
            for item in results:
                log.warning("worker timed out", session=item.session, item=item.id)
                self.post(item)

    async def dispatch(
        self,
        *,
        parent: str | None,
        parent_turn: str | None,
        tool_call: str | None,
        target: dict[str, Any],
        task: str,
        handoff: Handoff | None = None,
        reaching: Reaching | None = None,
    ) -> Dispatched:
        """agent_send(op="dispatch"): queue a task on a session or a new worker session;
        `reaching`: a broker tool's call, checked against its turn's reach."""
        w = self.settings.workers
        limits = Limits(w.max_depth, w.max_children, int(w.timeout_s * 1000))
        now = now_ms()
        done = await self.ledger.dispatch(
            parent=parent,
            parent_turn=parent_turn,
            tool_call=tool_call,
            target=target,
            task=task,
            persona=w.persona,
            limits=limits,
            now=now,
            handoff=handoff,
            reaching=reaching,
        )
        self.post(done.item)
        log.info("dispatched", session=parent, worker=done.session, dispatch=done.dispatch)
        return done

    async def _rehydrate(self) -> None:
        now = now_ms()
        # Under another runtime a running turn may be another node's: the runtime
        # recovers a session's cut-off turn itself (broker/runtime/temporal/activities.py).
        recovered = [] if self.forward is not None else await self.ledger.recover_crashed(now)
        if recovered:
            log.warning("turns cut off by a crash recorded as aborted", turns=len(recovered))
        items = await self.ledger.open_items()
        by_session: dict[str, list[ItemInfo]] = {}
        for item in items:
            by_session.setdefault(item.session, []).append(item)
        for label, backlog in by_session.items():
            if self.forward is not None:
                for item in backlog:
                    self.forward(item)
            else:
                self._start(label, backlog)
        if items:
            log.info("backlog rehydrated", items=len(items), sessions=len(by_session))

    # -- feeding ---------------------------------------------------------------

    def on_committed(self, accepted: Accepted, rec: InboundRecord) -> None:
        """Hand a newly committed message's item to its session's actor (called by the
        ingress's completion task once the commit is reported: ingress.py).

        The record comes from the daemon, which holds it: the writer does not send it back.
        """
        if accepted.thread is not None:  # ledger/resets.py
            thread, reason = accepted.thread
            log.info(
                "thread reset",
                session=accepted.session,
                thread=thread,
                previous=thread - 1,
                reason=reason,
                msg_id=accepted.msg_id,
            )
            # Under another runtime the turn's actor finds the new thread pending in the
            # ledger, wherever it runs; only a local actor is told here.
            if self.forward is None:
                self.begin_thread(accepted.session, thread, reason, accepted.seq)
        # Positional: keyword arguments cost a named tuple of 16 fields twice as much.
        self.post(
            ItemInfo(
                accepted.item,  # id
                accepted.seq,
                accepted.session,
                "person",  # source
                rec.queue_mode,  # mode
                "queued",  # status
                None,  # turn_id
                None,  # payload
                rec.channel,
                rec.msg_id,
                rec.sender_id,
                rec.sender_name,
                rec.peer_kind,
                rec.peer_id,
                rec.thread_id,
                rec.text,
                None,  # dispatch_id
                rec.route_mode,
            )
        )

    def merged(self, result: MergeResult) -> None:
        """A live actor of a merge's primary session learns of its bridge notes now;
        one that starts later reads them from the ledger (ledger/bridges.py)."""
        actor = self.actors.get(result.primary) if result.primary is not None else None
        if actor is not None and result.bridges:
            actor.facts.ctx.add_bridges(result.bridges)

    def post(self, item: ItemInfo) -> None:
        if self.forward is not None:
            self.forward(item)
            return
        self._actor_for(item.session).post(item)

    def _actor_for(self, label: str) -> SessionActor:
        actor = self.actors.get(label)
        if actor is None:
            # A live item is an arrival, not rehydrated backlog: it must go
            # through the machine as one (a collect item waits its quiet period).
            # But after an actor of this session failed, its items wait in the ledger
            # (some still marked running): recover them first, or they are stranded
            # and this item runs ahead of them.
            actor = self._start(label, None if self._restarts.failed_before(label) else [])
        return actor

    def begin_thread(self, label: str, thread: int, reason: str, from_seq: int = 0) -> None:
        """A thread decided in the ledger: the session's actor begins it before its next
        turn, or before the turn of the message of `from_seq` that decided it (an actor
        that starts later finds it pending in the ledger too)."""
        self._actor_for(label).post(ThreadRequest(thread, reason, from_seq))

    def cancel(self, label: str, item: str) -> str:
        """`item.cancel` as the session's actor sees it (SessionActor.cancel)."""
        actor = self.actors.get(label)
        return "absent" if actor is None else actor.cancel(item)

    def _start(self, label: str, backlog: list[ItemInfo] | None) -> SessionActor:
        assert self._tg is not None, "mailboxes are not running"
        actor = SessionActor(label, self.ports, draining=self.draining)
        self.actors[label] = actor
        self.started_actors += 1
        self._tg.start_soon(self._run_actor, actor, backlog)
        return actor

    async def _run_actor(self, actor: SessionActor, backlog: list[ItemInfo] | None) -> None:
        try:
            await actor.run(backlog)
            self._restarts.ran(actor.label)
        except Exception as exc:
            if self.actors.get(actor.label) is actor:
                del self.actors[actor.label]
            if isinstance(exc, WriterClosed) or self.ledger.writer_died is not None:
                # Not this session's fault: the writer is gone and the daemon stops
                # on it (daemon.py says so once). The items wait in the ledger.
                return
            # A bug in one session must not stop the others. The session's items
            # are in the ledger: a fresh actor recovers them (restarts.py).
            back_off_s = self._restarts.failed(actor.label, exc)
            if back_off_s is not None and stopped_by_storage(exc):
                log.warning(
                    "actor stopped by the ledger's storage; started again after a back-off",
                    session=actor.label,
                    error=str(exc),
                    back_off_s=back_off_s,
                )
            else:
                log.exception("actor failed", session=actor.label)
            if back_off_s is None:
                log.critical(
                    "actor keeps failing; its items wait in the ledger until restart",
                    session=actor.label,
                    failures=self._restarts.failures_of(actor.label),
                )
                return
            # Not shielded: a daemon that stops must not wait out a back-off.
            await anyio.sleep(back_off_s)
            if actor.label not in self.actors:
                self._start(actor.label, None)

    def failures_of(self, label: str) -> int:
        """How often the actors of `label` failed; past MAX_ACTOR_RESTARTS none is started
        again until an item arrives or the daemon restarts."""
        return self._restarts.failures_of(label)

    def storage_stopped(self, label: str) -> bool:
        """Whether the session's last actor was stopped by the ledger's storage: the
        next one starts after a back-off, for as long as the storage fails."""
        return self._restarts.in_outage(label)

    def _busy(self) -> list[SessionActor]:
        return [a for a in self.actors.values() if a.turn is not None]

    async def drain(self, grace_s: float) -> None:
        """Start no new turn; let running ones finish for `grace_s`, then abort them.

        An aborted turn is committed with reason `shutdown` and its items go
        back to the queue, so they run again after the next start.
        """
        self.draining = True
        for actor in self.actors.values():
            actor.drain()
        with anyio.move_on_after(grace_s):
            while self._busy():
                await self.ports.a_turn_ends()
        # A write the storage refuses fails from here on, rather than hold the
        # shutdown: its items are in the ledger for the next start.
        self.ledger.stop_retrying()
        busy = self._busy()
        if busy:
            log.warning("aborting turns still running at the shutdown deadline", turns=len(busy))
        for actor in busy:
            assert actor.turn is not None
            actor.turn.abort("shutdown")
        with anyio.move_on_after(SHUTDOWN_COMMIT_S):
            while self._busy():
                await self.ports.a_turn_ends()

    def retire(self, actor: SessionActor) -> None:
        if self.actors.get(actor.label) is actor:
            del self.actors[actor.label]

    def reconfigure(self, settings: Settings) -> None:
        """New queue settings (a reload): every live actor recomputes its limits."""
        self.settings = self.ports.settings = settings
        for actor in self.actors.values():
            actor.post(m.Configure(actor.limits()))

    async def compact(self, label: str, instructions: str | None) -> str | None:
        """session.compact: run a compaction turn now (between turns); its id or None."""
        actor = self.actors.get(label) or self._start(label, [])
        request = CompactRequest(instructions)
        actor.post(request)
        with anyio.fail_after(self.settings.engine.compaction_timeout_s + 60):
            await request.done.wait()
        return request.turn

    # -- what the tools see besides `dispatch` (broker/tools/table.py ToolContext) ------------

    @property
    def wide(self) -> tuple[tuple[str, str], ...]:
        return self.ports.router.wide

    def compact_later(self, label: str, focus: str | None) -> None:
        """`session_compact`: a manual compaction of `label` after its running turn."""
        (self.actors.get(label) or self._start(label, [])).post(CompactRequest(focus))

    def state_record(self, label: str) -> str | None:
        """The session-state record the session's live actor would put in its context."""
        actor = self.actors.get(label)
        return actor.facts.ctx.state.render() if actor is not None else None

    def mcp_servers(self, label: str) -> frozenset[str] | None:
        """The MCP servers whose tools `label`'s turns get (`mcp_servers_of`)."""
        actor = self.actors.get(label)
        return mcp_servers_of(self.router, actor.facts) if actor is not None else None

    def scratchpad_merged(self, label: str, pad: Any, at: int) -> None:
        """A merge committed: the session's live actor shows it from its next turn on."""
        actor = self.actors.get(label)
        if actor is not None:
            actor.facts.scratchpad_merged(pad, at)

    async def aclose_engines(self) -> None:
        await self.ports.aclose_engines()

    def state_of(self, label: str) -> str:
        actor = self.actors.get(label)
        return actor.status if actor is not None else "idle"


def mcp_servers_of(router: Router, facts: SessionFacts) -> frozenset[str] | None:
    """The route rule of the session's latest arrival decides; a session none came to
    gets every server. A worker gets at most what the sessions it came from get: each
    one's rule narrows it further (None: no narrowing)."""
    item = facts.latest_inbound
    if item is not None and item.channel and item.peer_kind and item.sender_id:
        own = router.decision(item.channel, item.peer_kind, item.sender_id).mcp
    else:
        own = _route_mcp(router, facts.stored_route)
    for route in facts.ancestors:
        theirs = _route_mcp(router, route)
        if theirs is not None:
            own = theirs if own is None else own & theirs
    return own


def _route_mcp(router: Router, route: Route | None) -> frozenset[str] | None:
    if route is None or not route[1] or not route[2]:
        return None
    # A stored route names the peer: the sender of a DM.
    return router.decision(route[0], route[1], route[2]).mcp
