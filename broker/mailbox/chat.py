"""Chat commands applied: `/queue`, `/stop`, `/status`, `/new`, `/compact`, `/fork`,
`/switch`, `/merge` and `/help` in inbound text.

A command never reaches the engine: it is applied to its session's actor at once and
answered with a plain sentence, or refused (not allowed by the route rule, malformed)
with one, and nothing else changes. The item is marked done and the reply's outbox row
written in one transaction (`command_done`); the reply is expected by Deliveries
before that is queued and sent once it commits, by a task of the registry's group
that awaits the commit (never in the ledger writer's task). `/fork` and `/switch`
change where the conversation's messages go: the fork, the binding, the item done and
the reply are one transaction (ledger/binding_jobs.py), which also decides the reply's
words, since only it knows whether the target exists and whose it is. `/merge yes N`
is allowed only to the route's owners (the rule's principal `owner`, beside the
rule's `commands`); its decision, merge, item and reply are one transaction too
(ledger/proposals.py).

A command is handled only while the ledger's queue of writes has room (the actor
waits for some). One that waited `ledger.writer_wait_s` in vain is answered that the
broker is overloaded, as the ingress answers a message, and changes nothing: it is not
applied, and its item ends with the reason `command:overloaded` and that answer once
room comes (a reply is sent only from its commit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio.abc
import orjson

from broker.deliveries import Deliveries
from broker.mailbox.commands import (
    BINDING,
    OWNERS_ONLY,
    Command,
    CommandError,
    help_text,
    parse,
)
from broker.mailbox.ports import CommandTarget
from broker.router import Router
from core.bindings import Conversation
from core.proposals import parse_verdict
from ledger.port.protocols import Committing, LedgerPort
from ledger.port.records import BindCommand, ItemInfo, MergeCommand, MergeResult
from plumbing.ids import new_id, now_ms


class ChatCommands:
    def __init__(self, ledger: LedgerPort, router: Router, deliveries: Deliveries) -> None:
        self.ledger = ledger
        self.router = router
        self.deliveries = deliveries
        self.tg: anyio.abc.TaskGroup | None = None  # the registry's, where replies wait
        # Hands an accepted merge's bridge notes to a live primary (the registry's).
        self.merged: Callable[[MergeResult], None] = lambda result: None

    def handle(self, actor: CommandTarget, item: ItemInfo, overloaded: bool = False) -> None:
        """Apply a chat command at once (it never reaches the engine) and reply;
        `overloaded`: it found no room in time, and is refused."""
        override: str | bool | None = False
        if overloaded:
            name = (item.text or "").split(maxsplit=1)[0]
            text = f"The broker is overloaded: {name} was not applied. Send it again in a moment."
            self._reply(actor.label, item, text, "command:overloaded", override)
            return
        try:
            command = parse(item.text or "")
            assert command is not None
            if command.name == "help":
                text, reason = help_text(self._commands(item)), "command:help"
            elif not self._allowed(item, command.name):
                text, reason = f"/{command.name} is not allowed for you here.", "command:refused"
            elif command.name in BINDING:
                self._bind(actor.label, item, command)
                return
            elif command.name == "merge":
                self._merge(actor.label, item, command)
                return
            else:
                text, reason = self._answer(actor, command), f"command:{command.name}"
                if command.name == "queue":
                    override = orjson.dumps(command.override).decode() if command.override else None
                actor.apply_command(command)
        except CommandError as exc:
            text, reason = str(exc), "command:invalid"
        self._reply(actor.label, item, text, reason, override)

    def _allowed(self, item: ItemInfo, name: str) -> bool:
        return name in self._commands(item)

    def _commands(self, item: ItemInfo) -> frozenset[str]:
        """The commands the item's route allows its sender (`/merge` to owners only)."""
        if not (item.channel and item.peer_kind and item.sender_id):
            return frozenset()
        decision = self.router.decision(item.channel, item.peer_kind, item.sender_id)
        if decision.principal == "owner":
            return decision.commands
        return decision.commands - OWNERS_ONLY

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

    def _bind(self, label: str, item: ItemInfo, command: Command) -> None:
        """`/fork`, `/switch`; `_allowed` saw the item's conversation."""
        assert item.channel and item.peer_kind and item.peer_id
        out_id = new_id()
        cmd = BindCommand(
            "fork" if command.name == "fork" else "switch",
            item.id,
            label,
            Conversation(item.channel, item.peer_kind, item.peer_id, item.thread_id),
            command.args or None,
            out_id,
            _frame(label, item, out_id, ""),
        )
        pending = self.ledger.submit_chat_bind(cmd, now_ms())
        channel = item.channel
        self.deliveries.expect(out_id)
        self._send_when_committed(pending, out_id, channel, label, None)

    def _merge(self, label: str, item: ItemInfo, command: Command) -> None:
        """`/merge yes N`, `/merge no N`; `_allowed` saw that the sender is an owner."""
        try:
            accept, number = parse_verdict(command.args)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        assert item.channel is not None
        out_id = new_id()
        cmd = MergeCommand(
            accept,
            number,
            f"owner:{item.channel}:{item.sender_id}",
            item.id,
            label,
            item.channel,
            out_id,
            _frame(label, item, out_id, ""),
        )
        pending = self.ledger.submit_chat_merge(cmd, now_ms())
        self.deliveries.expect(out_id)
        assert self.tg is not None, "chat commands answer only while the registry runs"
        self.tg.start_soon(self._send_merged, pending, out_id, item.channel, label)

    async def _send_merged(
        self,
        pending: Committing[tuple[str, MergeResult | None]],
        out_id: str,
        channel: str,
        label: str,
    ) -> None:
        try:
            frame_json, merged = await pending.result()
        except Exception:  # the row was not written: nothing to send (deliveries.py)
            self.deliveries.abandon(out_id)
            return
        if merged is not None:
            self.merged(merged)
        self.deliveries.deliver(out_id, channel, label, frame_json)

    def _reply(
        self, label: str, item: ItemInfo, text: str, reason: str, override: str | bool | None
    ) -> None:
        reply: tuple[str, str, str, str] | None = None
        if item.channel is not None:
            out_id = new_id()
            reply = (out_id, label, item.channel, _frame(label, item, out_id, text))
        now = now_ms()
        pending = self.ledger.submit_command_done(item.id, reason, reply, override, now)
        if reply is not None:
            out_id, label, channel, frame_json = reply
            self.deliveries.expect(out_id)  # before the commit can be read: it is only queued
            self._send_when_committed(pending, out_id, channel, label, frame_json)

    def _send_when_committed(
        self,
        pending: Committing[Any],
        out_id: str,
        channel: str,
        label: str,
        frame_json: str | None,
    ) -> None:
        """Send the reply once its row is committed; `frame_json` None: the
        frame is what the write answers."""
        assert self.tg is not None, "chat commands answer only while the registry runs"
        self.tg.start_soon(self._send, pending, out_id, channel, label, frame_json)

    async def _send(
        self,
        pending: Committing[Any],
        out_id: str,
        channel: str,
        label: str,
        frame_json: str | None,
    ) -> None:
        try:
            written = await pending.result()
        except Exception:  # the row was not written: nothing to send (deliveries.py)
            self.deliveries.abandon(out_id)
            return
        self.deliveries.deliver(out_id, channel, label, frame_json or written)


def _frame(label: str, item: ItemInfo, out_id: str, text: str) -> str:
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
    return orjson.dumps(frame).decode()
