"""From a validated inbound frame to what the ledger should write.

Pure: applies the routing policy and the queue-mode permission; the identity
lookups that need the ledger happen inside the ingest transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import orjson

from core.identity import SessionSpec
from core.queue_machine import QueueMode
from core.resets import NO_RESETS, ResetPolicy
from ledger.port.records import InboundRecord
from policies.model import Decision, Delivery, Rule, decide, wide_contacts
from policies.ratelimit import RateLimiter
from wire.frames import InboundMessage
from wire.framing import ProtocolError


@dataclass(frozen=True, slots=True)
class Routed:
    record: InboundRecord
    spec: SessionSpec


DECISION_CACHE = 100_000


class Router:
    def __init__(
        self,
        rules: tuple[Rule, ...],
        owners: frozenset[tuple[str, str]],
        clock: Callable[[], float] = time.monotonic,
        resets: ResetPolicy = NO_RESETS,
    ) -> None:
        self.rules = rules
        self.owners = owners
        self.resets = resets  # `[reset]`, which a rule's own `reset` keys override
        self.clock = clock
        self.limiter = RateLimiter()
        # Decisions depend only on (channel, peer kind, sender) and the rules.
        self._decisions: dict[tuple[str, str, str], Decision] = {}
        self.wide = wide_contacts(rules, owners)  # whose turns reach every session

    def update(
        self,
        rules: tuple[Rule, ...],
        owners: frozenset[tuple[str, str]],
        resets: ResetPolicy = NO_RESETS,
    ) -> None:
        """New rules (a reload): forget cached decisions and rate buckets."""
        self.rules, self.owners, self.resets = rules, owners, resets
        self.wide = wide_contacts(rules, owners)
        self._decisions.clear()
        self.limiter.clear()

    def decision(self, channel: str, peer_kind: str, sender_id: str) -> Decision:
        key = (channel, peer_kind, sender_id)
        found = self._decisions.get(key)
        if found is None:
            if len(self._decisions) >= DECISION_CACHE:
                self._decisions.clear()
            found = decide(
                self.rules,
                Delivery(channel, msg_kind(peer_kind), sender_id),
                self.owners,
                self.resets,
            )
            self._decisions[key] = found
        return found

    def route(
        self,
        channel: str,
        msg: InboundMessage,
        req: str | None,
        person_mode: QueueMode | None = None,
    ) -> Routed:
        """The message's record and session spec; its route's queue mode (the rule's,
        else `person_mode`) is decided here, once, and stored with its item."""
        decision = self.decision(channel, msg.peer_kind, msg.sender_id)
        if decision.rate is not None and not self.limiter.allow(
            (decision.rule, channel, msg.sender_id), decision.rate, self.clock()
        ):
            raise ProtocolError(
                "overloaded",
                f"rate limit of rule {decision.rule!r}: at most {decision.rate.per_minute:g} "
                f"messages a minute (burst {decision.rate.burst}); retry later",
                req=req,
            )
        if (
            msg.queue_mode is not None
            and decision.allowed_modes is not None
            and msg.queue_mode not in decision.allowed_modes
        ):
            allowed = ", ".join(sorted(decision.allowed_modes)) or "none"
            raise ProtocolError(
                "invalid",
                f"queue_mode {msg.queue_mode!r} is not allowed for this sender by rule "
                f"{decision.rule!r} (allowed: {allowed})",
                field="queue_mode",
                req=req,
            )
        # Positional: keyword arguments cost a named tuple of 12 fields about twice as much.
        record = InboundRecord(
            channel,
            msg.msg_id,
            msg.sender_id,
            msg.sender_name,
            msg.peer_kind,
            msg.peer_id or msg.sender_id,  # peer_id
            msg.thread_id,
            msg.text,
            msg.ts,
            msg.queue_mode,
            _meta_json(msg.meta, req),  # meta
            decision.default_mode or person_mode,  # route_mode
        )
        return Routed(record, decision.spec)


def _meta_json(meta: dict[str, object] | None, req: str | None) -> str | None:
    if not meta:
        return None
    try:
        return orjson.dumps(meta).decode()
    except orjson.JSONEncodeError as exc:  # e.g. nested deeper than orjson writes
        raise ProtocolError(
            "invalid", f"meta cannot be stored: {exc}", field="meta", req=req
        ) from exc


def msg_kind(peer_kind: str) -> Literal["dm", "group"]:
    return "dm" if peer_kind == "dm" else "group"
