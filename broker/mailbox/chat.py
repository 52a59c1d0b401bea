"""Chat commands applied: `/queue`, `/stop`, `/status`, `/new`, `/compact` in inbound text.

Rule 1: a command never reaches the engine; it is applied to its session's actor at
        once and answered with a plain sentence, or refused (not allowed by the route
        rule, malformed) with one, and nothing else changes.
Rule 2: the item is marked done and the reply's outbox row written in one transaction
        (`command_done`); the reply is expected by Deliveries before that is queued and
        sent once it commits, by a task of the registry's group that awaits the commit
        (never in the ledger writer's task).
"""

from __future__ import annotations

from typing import Any

import anyio.abc
import orjson

from broker.deliveries import Deliveries
from broker.router import Router
from ledger.ids import new_id, now_ms
from ledger.items import ItemInfo
from ledger.port import Committing, TurnPort

from .commands import Command, CommandError, parse
from .ports import CommandTarget


class ChatCommands:
    def __init__(self, ledger: TurnPort, router: Router, deliveries: Deliveries) -> None:
        self.ledger = ledger
        self.router = router
        self.deliveries = deliveries
        self.tg: anyio.abc.TaskGroup | None = None  # the registry's, where replies wait

    def handle(self, actor: CommandTarget, item: ItemInfo) -> None:
        """Apply a chat command at once (it never reaches the engine) and reply."""
        override: str | bool | None = False
        try:
            command = parse(item.text or "")
            assert command is not None
            if not self._allowed(item, command.name):
                text, reason = f"/{command.name} is not allowed for you here.", "command:refused"
            else:
                text, reason = self._answer(actor, command), f"command:{command.name}"
                if command.name == "queue":
                    override = orjson.dumps(command.override).decode() if command.override else None
                actor.apply_command(command)
        except CommandError as exc:
            text, reason = str(exc), "command:invalid"
        self._reply(actor.label, item, text, reason, override)

    def _allowed(self, item: ItemInfo, name: str) -> bool:
        if not (item.channel and item.peer_kind and item.sender_id):
            return False
        return name in self.router.decision(item.channel, item.peer_kind, item.sender_id).commands

    def _answer(self, actor: CommandTarget, command: Command) -> str:
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
        facts = actor.facts
        prompt, completion = facts.tokens
        return (
            f"state: {actor.status}; waiting: {actor.backlog}; turns: {facts.turn_count}; "
            f"tokens: {prompt} prompt + {completion} completion; "
            f"queue: {facts.override.get('mode', 'default')}"
        )

    def _reply(
        self, label: str, item: ItemInfo, text: str, reason: str, override: str | bool | None
    ) -> None:
        reply: tuple[str, str, str, str] | None = None
        if item.channel is not None:
            out_id = new_id()
            frame: dict[str, Any] = {
                "type": "deliver",
                "out_id": out_id,
                "session": label,
                "turn": None,
                "peer_kind": item.peer_kind,
                "peer_id": item.peer_id,
                "thread_id": item.thread_id,
                "in_reply_to": [item.msg_id],
                "text": text,
                "status": "final",
            }
            reply = (out_id, label, item.channel, orjson.dumps(frame).decode())
        now = now_ms()
        pending = self.ledger.submit_command_done(item.id, reason, reply, override, now)
        if reply is not None:
            assert self.tg is not None, "chat commands answer only while the registry runs"
            self.deliveries.expect(reply[0])  # before the commit can be read: it is only queued
            self.tg.start_soon(self._send_when_committed, pending, reply)

    async def _send_when_committed(
        self, pending: Committing[None], reply: tuple[str, str, str, str]
    ) -> None:
        out_id, label, channel, frame_json = reply
        await pending.wait()
        try:
            pending.get()
        except Exception:  # the row was not written: nothing to send (deliveries.py Rule 1)
            self.deliveries.abandon(out_id)
            return
        self.deliveries.deliver(out_id, channel, label, frame_json)
