"""The registry of live mailbox actors.

Rule 1: at most one actor per session label. An actor is started when its
        session gets work and retires itself after an idle period; it leaves
        the registry in the same step in which it finds itself idle, so a new
        item after that starts a fresh actor and two never overlap.
Rule 2: every actor runs in the daemon's actor task group; none outlives it.
Rule 3: at start, turns cut off by a crash are recorded as aborted and their
        items re-queued, and every waiting item is handed to its actor, before
        the socket accepts new work.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Literal

import anyio
import anyio.abc
import orjson

from broker.config import Settings
from broker.context import TokenCounter
from broker.core import queue_machine as m
from broker.deliveries import Deliveries
from broker.engines.base import Engine
from broker.engines.factory import build_engine
from broker.loopclock import loop_clock
from broker.router import Router
from ledger import dispatch, logs
from ledger import turns as lt
from ledger.ids import new_id, now_ms
from ledger.ingest import Accepted, InboundRecord
from ledger.items import ItemInfo
from ledger.jobs import LedgerWriteFailed
from ledger.store import Ledger
from ledger.turns import HeadMoved, TurnRecord
from ledger.writer import WriterClosed

from .actor import CompactRequest, SessionActor
from .commands import Command, CommandError, parse

log = logs.get("broker.mailboxes")
Written = Literal["thread", "orphan", "lost"]
MAX_ACTOR_RESTARTS = 5
SWEEP_S = 5.0
SHUTDOWN_COMMIT_S = 10.0  # for the commits of turns aborted at shutdown


class Mailboxes:
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        engine: Engine,
        router: Router,
        deliveries: Deliveries,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.engine = engine
        self.router = router
        self.deliveries = deliveries
        self.counter = TokenCounter(settings.engine.encoding)
        # Engines of personas that name one, built when first used.
        self.engines: dict[str, Engine] = {}
        self.actors: dict[str, SessionActor] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.started_actors = 0
        self._failures: dict[str, int] = {}
        self.draining = False
        # Made only while `drain` waits on it: a turn's end costs nothing otherwise.
        self._turn_ended: anyio.Event | None = None
        # anyio's clock; the loop's own, read without the backend lookup, once running.
        self.clock: Callable[[], float] = anyio.current_time

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the actors; rehydrate the backlog before reporting started."""
        self.clock = loop_clock()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await self._rehydrate()
            task_status.started()
            await self._sweep_dispatches_forever()

    async def _sweep_dispatches_forever(self) -> None:
        """End dispatches past their deadline (their workers timed out)."""
        while True:
            await anyio.sleep(min(SWEEP_S, self.settings.workers.timeout_s / 4))
            try:
                results = await self.ledger.write(dispatch.sweep_timeouts, now_ms())
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
    ) -> dispatch.Dispatched:
        """agent_send(op="dispatch"): queue a task on a session or a new worker session."""
        w = self.settings.workers
        limits = dispatch.Limits(w.max_depth, w.max_children, int(w.timeout_s * 1000))
        now = now_ms()
        done = await self.ledger.write(
            dispatch.dispatch,
            parent=parent,
            parent_turn=parent_turn,
            tool_call=tool_call,
            target=target,
            task=task,
            persona=w.persona,
            limits=limits,
            now=now,
        )
        self.post(done.item)
        log.info("dispatched", session=parent, worker=done.session, dispatch=done.dispatch)
        return done

    async def _rehydrate(self) -> None:
        now = now_ms()
        recovered = await self.ledger.write(lt.recover_crashed, now)
        if recovered:
            log.warning("turns cut off by a crash recorded as aborted", turns=len(recovered))
        items = await self.ledger.read(lt.load_open_items)
        by_session: dict[str, list[ItemInfo]] = {}
        for item in items:
            by_session.setdefault(item.session, []).append(item)
        for label, backlog in by_session.items():
            self._start(label, backlog)
        if items:
            log.info("backlog rehydrated", items=len(items), sessions=len(by_session))

    # -- feeding ---------------------------------------------------------------

    def on_committed(self, accepted: Accepted, rec: InboundRecord) -> None:
        """After-commit hook of ingest: hand the new item to its session's actor.

        The record comes from the daemon, which holds it: the writer does not send it back.
        """
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
            )
        )

    def post(self, item: ItemInfo) -> None:
        actor = self.actors.get(item.session)
        if actor is None:
            # A live item is an arrival, not rehydrated backlog: it must go
            # through the machine as one (a collect item waits its quiet period).
            # But after an actor of this session failed, its items wait in the ledger
            # (some still marked running): recover them first, or they are stranded
            # and this item runs ahead of them.
            actor = self._start(item.session, None if item.session in self._failures else [])
        actor.post(item)

    def _start(self, label: str, backlog: list[ItemInfo] | None) -> SessionActor:
        assert self._tg is not None, "mailboxes are not running"
        actor = SessionActor(label, self)
        self.actors[label] = actor
        self.started_actors += 1
        self._tg.start_soon(self._run_actor, actor, backlog)
        return actor

    async def _run_actor(self, actor: SessionActor, backlog: list[ItemInfo] | None) -> None:
        try:
            await actor.run(backlog)
        except Exception as exc:
            if self.actors.get(actor.label) is actor:
                del self.actors[actor.label]
            if isinstance(exc, WriterClosed) or self.ledger.writer.dead is not None:
                # Not this session's fault: the writer is gone and the daemon stops
                # on it (daemon.py says so once). The items wait in the ledger.
                return
            # A bug in one session must not stop the others. The session's items
            # are in the ledger: a fresh actor recovers them (bounded retries).
            log.exception("actor failed", session=actor.label)
            failures = self._failures.get(actor.label, 0) + 1
            self._failures[actor.label] = failures
            if failures > MAX_ACTOR_RESTARTS:
                log.critical(
                    "actor keeps failing; its items wait in the ledger until restart",
                    session=actor.label,
                    failures=failures,
                )
                return
            # Not shielded: a daemon that stops must not wait out a back-off.
            await anyio.sleep(min(5.0, 0.1 * 2**failures))
            if actor.label not in self.actors:
                self._start(actor.label, None)

    def failures_of(self, label: str) -> int:
        """How often the actors of `label` failed; past MAX_ACTOR_RESTARTS none is started
        again until an item arrives or the daemon restarts."""
        return self._failures.get(label, 0)

    async def recover_session(self, label: str) -> list[ItemInfo]:
        now = now_ms()
        await self.ledger.write(lt.recover_crashed, now, session=label)
        return await self.ledger.read(lambda c: lt.load_open_items(c, session=label))

    def turn_ended(self) -> None:
        if self._turn_ended is not None:
            self._turn_ended.set()
            self._turn_ended = None

    async def _a_turn_ends(self) -> None:
        if self._turn_ended is None:
            self._turn_ended = anyio.Event()
        await self._turn_ended.wait()

    def _busy(self) -> list[SessionActor]:
        return [a for a in self.actors.values() if a.turn is not None]

    async def drain(self, grace_s: float) -> None:
        """Start no new turn; let running ones finish for `grace_s`, then abort them.

        An aborted turn is committed with reason `shutdown` and its items go
        back to the queue, so they run again after the next start.
        """
        self.draining = True
        with anyio.move_on_after(grace_s):
            while self._busy():
                await self._a_turn_ends()
        # A write the storage refuses fails from here on, rather than hold the
        # shutdown: its items are in the ledger for the next start.
        self.ledger.writer.stop_retrying()
        busy = self._busy()
        if busy:
            log.warning("aborting turns still running at the shutdown deadline", turns=len(busy))
        for actor in busy:
            assert actor.turn is not None
            actor.turn.abort("shutdown")
        with anyio.move_on_after(SHUTDOWN_COMMIT_S):
            while self._busy():
                await self._a_turn_ends()

    def retire(self, actor: SessionActor) -> None:
        if self.actors.get(actor.label) is actor:
            del self.actors[actor.label]

    def reconfigure(self, settings: Settings) -> None:
        """New queue settings (a reload): every live actor recomputes its limits."""
        self.settings = settings
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

    def engine_for(self, persona: str | None) -> Engine:
        chosen = self.settings.personas.get(persona or "")
        name = chosen.engine if chosen is not None else None
        if name is None or name not in self.settings.engines:
            return self.engine
        if name not in self.engines:
            self.engines[name] = build_engine(self.settings.engines[name])
        return self.engines[name]

    async def aclose_engines(self) -> None:
        for engine in (self.engine, *self.engines.values()):
            await engine.aclose()

    def state_of(self, label: str) -> str:
        actor = self.actors.get(label)
        return actor.status if actor is not None else "idle"

    # -- turn commits ----------------------------------------------------------

    async def commit(self, rec: TurnRecord) -> Written:
        """Commit a turn. Its reply, if any, is expected by Deliveries meanwhile
        (deliveries.py Rule 1) and sent by the commit's own callback, as a chat
        command's is: it leaves when the writer reports the commit, not after the
        actor's task has been scheduled again."""
        out_id = rec.outbox[0] if rec.outbox is not None else None
        if out_id is not None:
            self.deliveries.expect(out_id)
        written: Written = "lost"
        try:
            written = await self._write_turn(rec)
        finally:
            if out_id is not None and written == "lost":
                self.deliveries.abandon(out_id)
        return written

    async def _write_turn(self, rec: TurnRecord) -> Written:
        try:
            self._post_results(rec, await self._write(lt.commit_turn, rec))
            return "thread"
        except HeadMoved:
            log.error(
                "head moved under a running turn; recorded as failed off the thread",
                session=rec.session,
                turn=rec.turn_id,
                parent=rec.parent_id,
            )
        except LedgerWriteFailed as exc:
            log.error(
                "turn commit failed; its items stay running and are recovered at the next start",
                session=rec.session,
                turn=rec.turn_id,
                error=str(exc),
            )
            return "lost"
        try:
            self._post_results(rec, await self._write(lt.commit_orphan, rec))
            return "orphan"
        except LedgerWriteFailed:
            return "lost"

    async def _write(
        self, job: Callable[[sqlite3.Connection, TurnRecord], list[ItemInfo]], rec: TurnRecord
    ) -> list[ItemInfo]:
        pending = self.ledger.writer.submit(job, rec)
        if rec.outbox is not None:
            out_id, channel, frame = rec.outbox
            session, deliveries = rec.session, self.deliveries
            pending.after_commit(lambda _: deliveries.deliver(out_id, channel, session, frame))
        return await pending.result()

    def _post_results(self, rec: TurnRecord, results: list[ItemInfo]) -> None:
        for item in results:
            log.info("worker result queued", session=item.session, worker=rec.session, item=item.id)
            self.post(item)

    # -- chat commands ---------------------------------------------------------

    def chat_command(self, actor: SessionActor, item: ItemInfo) -> None:
        """Apply a chat command at once (it never reaches the engine) and reply."""
        override: str | bool | None = False
        try:
            command = parse(item.text or "")
            assert command is not None
            allowed = self._allowed(item, command.name)
            if not allowed:
                text, reason = f"/{command.name} is not allowed for you here.", "command:refused"
            else:
                text, reason = self._command_reply(actor, command), f"command:{command.name}"
                if command.name == "queue":
                    override = orjson.dumps(command.override).decode() if command.override else None
                actor.apply_command(command)
        except CommandError as exc:
            text, reason = str(exc), "command:invalid"
        self._reply(actor, item, text, reason, override)

    def _allowed(self, item: ItemInfo, name: str) -> bool:
        if not (item.channel and item.peer_kind and item.sender_id):
            return False
        return name in self.router.decision(item.channel, item.peer_kind, item.sender_id).commands

    def _command_reply(self, actor: SessionActor, command: Command) -> str:
        if command.name == "stop":
            return "Stopped." if actor.turn is not None else "Nothing is running."
        if command.name == "new":
            return "Starting a new conversation thread."
        if command.name == "compact":
            return "Compacting the conversation: older turns become a summary."
        if command.name == "queue":
            if not command.override:
                return "Queue settings reset to the defaults."
            return "Queue settings: " + ", ".join(f"{k}={v}" for k, v in command.override.items())
        prompt, completion = actor.tokens
        return (
            f"state: {actor.status}; waiting: {actor.backlog}; turns: {actor.turn_count}; "
            f"tokens: {prompt} prompt + {completion} completion; "
            f"queue: {actor.override.get('mode', 'default')}"
        )

    def _reply(
        self,
        actor: SessionActor,
        item: ItemInfo,
        text: str,
        reason: str,
        override: str | bool | None,
    ) -> None:
        reply: tuple[str, str, str, str] | None = None
        if item.channel is not None:
            out_id = new_id()
            frame: dict[str, Any] = {
                "type": "deliver",
                "out_id": out_id,
                "session": actor.label,
                "turn": None,
                "peer_kind": item.peer_kind,
                "peer_id": item.peer_id,
                "thread_id": item.thread_id,
                "in_reply_to": [item.msg_id],
                "text": text,
                "status": "final",
            }
            reply = (out_id, actor.label, item.channel, orjson.dumps(frame).decode())
        now = now_ms()
        pending = self.ledger.writer.submit(lt.command_done, item.id, reason, reply, override, now)
        if reply is not None:
            out_id, label, channel, frame_json = reply
            self.deliveries.expect(out_id)  # before the commit can be read: it is only queued
            pending.after_commit(
                lambda _: self.deliveries.deliver(out_id, channel, label, frame_json),
                lambda _: self.deliveries.abandon(out_id),
            )
