"""The routing policy model: rules matched first to last.

Pure data and matching, no I/O. A rule matches a message on who sent it (the
principal), the channel, the peer kind and the sender; the first rule that
matches decides the session-key template, the persona, the default queue
mode, which modes the sender may choose and which chat commands it may use.

Rules are tried in order and the first match wins; the built-in defaults after the
configured rules make sure every message matches something. A rule is validated
when loaded: an unknown placeholder in a key template or an unknown mode is an error
that names the rule, and so is `reach = "any"` on a rule that could match anyone but
an owner. A turn's broker tools reach its own owner's sessions (core/reach.py); only
the owners whose rule says `reach = "any"` reach every session (`wide_contacts`).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.identity import TEMPLATE_FIELDS, SessionSpec
from core.queue_machine import QueueMode
from core.resets import NO_RESETS, ResetPolicy, parse_daily_at
from policies.ratelimit import Rate

PrincipalKind = Literal["owner", "known", "unknown"]
ChatCommand = Literal["queue", "stop", "status", "new", "compact", "fork", "switch", "merge"]
ALL_COMMANDS: tuple[ChatCommand, ...] = (
    "queue",
    "stop",
    "status",
    "new",
    "compact",
    "fork",
    "switch",
    "merge",
)


class Match(BaseModel):
    """What a rule matches; a key left unset matches anything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    principal: list[PrincipalKind] | None = Field(
        None,
        description="`owner` (a sender in `[[owners]]`), `known` (any other sender) or"
        " `unknown` (no sender id).",
    )
    channel: list[str] | None = Field(None, description="Channel names, as adapters give them.")
    peer_kind: list[Literal["dm", "group"]] | None = Field(
        None, description="A direct message or a group conversation."
    )
    sender: list[str] | None = Field(None, description="Sender ids on the channel.")


class SessionRule(BaseModel):
    """Which session a matched message goes to, and who answers it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(
        None,
        description="The session-key template, from the placeholders `{entity}` (the"
        " sender's canonical entity), `{channel}`, `{peer}`, `{thread}` and `{sender}`;"
        " unset: `dm:{entity}`, or `group:{channel}:{peer}` (plus `:thread:{thread}` in a"
        " thread).",
    )
    persona: str | None = Field(
        None, description="A persona in `[personas]`; unset: the default `[engine]`."
    )

    @field_validator("key")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        unknown = names - TEMPLATE_FIELDS
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {sorted(unknown)} in key template; "
                f"use {sorted(TEMPLATE_FIELDS)}"
            )
        try:  # format specs and conversions must work on real values too
            value.format(**{name: "x" for name in TEMPLATE_FIELDS})
        except (KeyError, ValueError, IndexError) as exc:
            raise ValueError(f"key template {value!r} cannot be filled: {exc}") from exc
        return value


class QueueRule(BaseModel):
    """The queue modes of a matched message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: QueueMode | None = Field(
        None,
        description="The route's default mode, after the message's own and the session's"
        " `/queue` override; unset: `[queue]`'s by source.",
    )
    allowed: list[QueueMode] | None = Field(
        None, description="Modes the sender may choose; unset: any."
    )


class ResetRule(BaseModel):
    """A route's own reset policy: each key set here replaces `[reset]`'s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_s: float | None = Field(None, ge=0, description="As `[reset] idle_s`.")
    daily_at: str | None = Field(None, description="As `[reset] daily_at`.")
    timezone: str | None = Field(
        None, description="As `[reset] timezone` (checked by `broker/config.py`)."
    )
    max_turns: int | None = Field(None, ge=0, description="As `[reset] max_turns`.")

    @field_validator("daily_at")
    @classmethod
    def _hh_mm(cls, value: str | None) -> str | None:
        if value is not None:
            parse_daily_at(value)  # its ValueError names the form
        return value

    def over(self, default: ResetPolicy) -> ResetPolicy:
        """`default` with this rule's keys in place of its own."""
        return default._replace(**self.model_dump(exclude_none=True))


class RateRule(BaseModel):
    """A rate limit per sender, as a token bucket."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_minute: float = Field(gt=0, description="Messages a minute, on average.")
    burst: int = Field(1, ge=1, description="Messages that may come at once.")


class Rule(BaseModel):
    """A route rule: what it matches, and what it decides for the messages it matches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="Named in logs and errors.")
    match: Match = Match()
    session: SessionRule = SessionRule()
    queue: QueueRule = QueueRule()
    commands: list[ChatCommand] | None = Field(
        None, description="Chat commands the sender may use; unset: every one."
    )
    rate: RateRule | None = Field(None, description="Unset: no limit.")
    reset: ResetRule | None = Field(None, description="Unset: the `[reset]` policy.")
    reach: Literal["own", "any"] = Field(
        "own",
        description="What the turns' broker tools may touch: `own`, the sessions of the"
        " sender's owner; `any`, every session (only on a rule that matches principal ="
        ' ["owner"] alone).',
    )

    @model_validator(mode="after")
    def _any_for_owners_alone(self) -> Rule:
        if self.reach == "any" and self.match.principal != ["owner"]:
            raise ValueError(
                f'rule {self.name!r}: reach = "any" is only for a rule that matches'
                ' principal = ["owner"] alone'
            )
        return self

    mcp: list[str] | None = Field(
        None, description="Names in `[[mcp.servers]]` whose tools its turns get; unset: all."
    )
    keep_days: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="Replaces `[retention] keep_days` for its sessions (fractions allowed; 0"
        " keeps forever; unset: the global one). A session follows the rule its latest"
        " message matches under the current rules; a worker or fork, its parent's.",
    )


class RulesFile(BaseModel):
    """A policies file: `[[rules]]` tables, matched first to last."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule] = Field(default_factory=list, description="The route rules.")


class Owner(BaseModel):
    """One person, by channel and sender id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: str = Field(description="The channel name.")
    sender_id: str = Field(description="Their sender id on that channel.")


DEFAULT_RULES: tuple[Rule, ...] = (Rule(name="default"),)


@dataclass(frozen=True, slots=True)
class Delivery:
    channel: str
    peer_kind: Literal["dm", "group"]
    sender_id: str


@dataclass(frozen=True, slots=True)
class Decision:
    rule: str
    principal: PrincipalKind
    key_template: str | None
    persona: str | None
    default_mode: QueueMode | None
    allowed_modes: frozenset[str] | None
    commands: frozenset[str]
    rate: Rate | None = None
    reset: ResetPolicy = NO_RESETS
    reach: Literal["own", "any"] = "own"
    mcp: frozenset[str] | None = None  # the MCP servers whose tools its turns get; None: all
    keep_days: float | None = None  # the rule's own retention; None: `[retention]`'s
    spec: SessionSpec = field(init=False)  # what the ingest transaction needs, built once

    def __post_init__(self) -> None:
        reset = self.reset if self.reset.active else None
        object.__setattr__(self, "spec", SessionSpec(self.key_template, self.persona, reset))


def principal_of(delivery: Delivery, owners: frozenset[tuple[str, str]]) -> PrincipalKind:
    if not delivery.sender_id:
        return "unknown"
    if (delivery.channel, delivery.sender_id) in owners:
        return "owner"
    return "known"


def _matches(match: Match, delivery: Delivery, principal: PrincipalKind) -> bool:
    return (
        (match.principal is None or principal in match.principal)
        and (match.channel is None or delivery.channel in match.channel)
        and (match.peer_kind is None or delivery.peer_kind in match.peer_kind)
        and (match.sender is None or delivery.sender_id in match.sender)
    )


def decide(
    rules: tuple[Rule, ...],
    delivery: Delivery,
    owners: frozenset[tuple[str, str]],
    resets: ResetPolicy = NO_RESETS,
) -> Decision:
    principal = principal_of(delivery, owners)
    for rule in (*rules, *DEFAULT_RULES):
        if _matches(rule.match, delivery, principal):
            return Decision(
                rule=rule.name,
                principal=principal,
                key_template=rule.session.key,
                persona=rule.session.persona,
                default_mode=rule.queue.mode,
                allowed_modes=None if rule.queue.allowed is None else frozenset(rule.queue.allowed),
                commands=frozenset(ALL_COMMANDS if rule.commands is None else rule.commands),
                rate=Rate(rule.rate.per_minute, rule.rate.burst) if rule.rate else None,
                reset=resets if rule.reset is None else rule.reset.over(resets),
                reach=rule.reach,
                mcp=None if rule.mcp is None else frozenset(rule.mcp),
                keep_days=rule.keep_days,
            )
    raise AssertionError("the default rule matches every delivery")  # pragma: no cover


def wide_contacts(
    rules: tuple[Rule, ...], owners: frozenset[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """The owners (channel, sender id) whose direct messages' rule grants reach "any":
    their turns' tools may touch every session."""
    return tuple(
        sorted(
            (channel, sender)
            for channel, sender in owners
            if decide(rules, Delivery(channel, "dm", sender), owners).reach == "any"
        )
    )
