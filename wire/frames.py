"""Wire protocol v1: validation of frames (framing itself is wire/framing.py).
Pure, no I/O.

Validation happens here, before anything reaches the router or the ledger: what
passes `parse_*` is well-formed and within limits.
"""

from __future__ import annotations

import calendar
import operator
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.queue_machine import QueueMode
from wire.framing import ProtocolError

VERSION = 1
CHANNEL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


class _Frame(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class Hello(_Frame):
    type: Literal["hello"]
    v: int
    role: Literal["adapter", "operator"]
    channel: str | None = None
    token: str | None = Field(None, max_length=4096)


def parse_hello(frame: dict[str, Any]) -> Hello:
    req = frame.get("req")
    if frame.get("type") != "hello":
        raise ProtocolError("bad_hello", "the first frame must be 'hello'", req=req)
    try:
        hello = Hello.model_validate(frame)
    except ValidationError as exc:
        field, msg = _first_error(exc)
        raise ProtocolError("bad_hello", f"hello: {field}: {msg}", field=field, req=req) from exc
    if hello.v != VERSION:
        raise ProtocolError(
            "unsupported_version",
            f"protocol version {hello.v} is not served; use {VERSION}",
            field="v",
            req=req,
        )
    if hello.role == "adapter" and not (hello.channel and CHANNEL_RE.fullmatch(hello.channel)):
        raise ProtocolError(
            "bad_hello",
            "an adapter's hello needs a channel matching [a-z0-9][a-z0-9_-]{0,31}",
            field="channel",
            req=req,
        )
    return hello


# RFC 3339's date-time with each field in its range (the day of the month
# aside: `is_timestamp`), taking two forms adapters already send: no offset (the
# sender's local time) and an offset without its colon (-0800). [0-9] because
# \d takes any script's digits. Seconds reach 60 for a leap second.
TS_RE = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):?[0-5][0-9])?"
)
_LAST_DAY = {"02": "29", "04": "30", "06": "30", "09": "30", "11": "30"}  # else 31


def is_timestamp(value: str) -> bool:
    """Whether `value` is a date and time that exists: TS_RE, and a day its month has.

    The day is compared as a string: for two ASCII digits the order is the
    numbers' order. Days before the 29th, nearly all, need no more than TS_RE.
    """
    if TS_RE.fullmatch(value) is None:
        return False
    day = value[8:10]
    if day < "29":
        return True
    month = value[5:7]
    if day > _LAST_DAY.get(month, "31"):
        return False
    return day != "29" or month != "02" or calendar.isleap(int(value[:4]))


class Inbound(_Frame):
    type: Literal["inbound"]
    msg_id: str = Field(min_length=1, max_length=128)
    sender_id: str = Field(min_length=1, max_length=256)
    sender_name: str | None = Field(None, max_length=256)
    peer_kind: Literal["dm", "group"]
    peer_id: str | None = Field(None, min_length=1, max_length=256)
    thread_id: str | None = Field(None, min_length=1, max_length=256)
    text: str
    ts: str | None = Field(None, max_length=64)
    queue_mode: QueueMode | None = None
    meta: dict[str, Any] | None = None
    # `reaction` and `reply_to` (a reaction to a reply) are checked by `parse_reaction`.

    @field_validator("ts")
    @classmethod
    def _iso_ts(cls, value: str | None) -> str | None:
        if value is not None and not is_timestamp(value):
            raise ValueError(
                "ts must be a real date and time as RFC 3339 writes it, such as"
                " 2026-11-22T10:00:00Z"
            )
        return value


class InboundMessage(NamedTuple):
    """A validated inbound frame (what `parse_inbound` returns)."""

    msg_id: str
    sender_id: str
    sender_name: str | None
    peer_kind: str
    peer_id: str | None
    thread_id: str | None
    text: str
    ts: str | None
    queue_mode: str | None
    meta: dict[str, Any] | None


# The validator `Inbound.model_validate` calls, without its Python wrapper around it.
_validate_inbound = Inbound.__pydantic_validator__.validate_python
_message_fields = operator.attrgetter(*InboundMessage._fields)  # one C call, not a loop


def parse_inbound(frame: dict[str, Any], max_text_bytes: int) -> InboundMessage:
    req = frame.get("req")
    try:
        model = _validate_inbound(frame)
    except ValidationError as exc:
        field, text = _first_error(exc)
        raise ProtocolError("invalid", f"{field}: {text}", field=field, req=req) from exc
    # Its fields as validated: `model_dump` would build a dict of copies (4x the time).
    msg = InboundMessage._make(_message_fields(model))
    if msg.peer_kind == "group" and msg.peer_id is None:
        raise ProtocolError(
            "invalid", "peer_id is required for a group message", field="peer_id", req=req
        )
    if len(msg.text) > max_text_bytes // 4 and len(msg.text.encode()) > max_text_bytes:
        raise ProtocolError(
            "invalid", f"text is longer than {max_text_bytes} bytes", field="text", req=req
        )
    return msg


def parse_reaction(frame: dict[str, Any]) -> tuple[str, str]:
    """(reaction, reply_to) of an inbound frame that carries a `reaction`: a person's
    reaction to a reply (a 👍, "approve") and the reply's `out_id`, recorded as a
    `feedback` event of the turn that made the reply (broker/reactions.py)."""
    req = frame.get("req")
    reaction, reply_to = frame.get("reaction"), frame.get("reply_to")
    if type(reaction) is not str or not 0 < len(reaction) <= 64:
        raise ProtocolError(
            "invalid", "reaction must be a string of 1 to 64 characters", field="reaction", req=req
        )
    if type(reply_to) is not str or not 0 < len(reply_to) <= 64:
        raise ProtocolError(
            "invalid",
            "a reaction needs reply_to: the out_id of the reply it reacts to",
            field="reply_to",
            req=req,
        )
    return reaction, reply_to


class Op(_Frame):
    type: Literal["op"]
    op: str = Field(min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)


def parse_model(model: type[_Frame], frame: dict[str, Any]) -> Any:
    try:
        return model.model_validate(frame)
    except ValidationError as exc:
        field, text = _first_error(exc)
        raise ProtocolError(
            "invalid", f"{field}: {text}", field=field, req=frame.get("req")
        ) from exc


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "frame"
    return field, str(err["msg"])


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """A typed argument of an operator op."""

    name: str
    kind: type
    required: bool = True
    max_len: int = 512
    minimum: int | None = None
    maximum: int | None = None


def check_args(args: dict[str, Any], specs: tuple[ArgSpec, ...], req: str | None) -> dict[str, Any]:
    """Validate op arguments; unknown ones are ignored as the protocol says."""
    out: dict[str, Any] = {}
    for spec in specs:
        value = args.get(spec.name)
        if value is None:
            if spec.required:
                raise ProtocolError(
                    "invalid", f"missing argument {spec.name!r}", field=spec.name, req=req
                )
            continue
        if spec.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ProtocolError(
                "invalid", f"{spec.name} must be an integer", field=spec.name, req=req
            )
        if not isinstance(value, spec.kind):
            raise ProtocolError(
                "invalid", f"{spec.name} must be a {spec.kind.__name__}", field=spec.name, req=req
            )
        if isinstance(value, str) and not 0 < len(value) <= spec.max_len:
            raise ProtocolError(
                "invalid",
                f"{spec.name} must be 1..{spec.max_len} characters",
                field=spec.name,
                req=req,
            )
        if isinstance(value, int) and (
            (spec.minimum is not None and value < spec.minimum)
            or (spec.maximum is not None and value > spec.maximum)
        ):
            raise ProtocolError(
                "invalid",
                f"{spec.name} must be in {spec.minimum}..{spec.maximum}",
                field=spec.name,
                req=req,
            )
        out[spec.name] = value
    return out
