"""Wire protocol v1: framing, validation and error frames. Pure, no I/O.

Rule 1: a frame is one JSON object on one line. A line longer than
        `max_frame_bytes` is an error that closes the connection; every other
        bad frame is answered and the connection stays open.
Rule 2: validation happens here, before anything reaches the router or the
        ledger: what passes `parse_*` is well-formed and within limits.
"""

from __future__ import annotations

import calendar
import operator
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from broker.core.queue_machine import QueueMode

VERSION = 1
CHANNEL_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MAX_REQ = 64

ErrorCode = Literal[
    "bad_json",
    "unknown_type",
    "invalid",
    "frame_too_large",
    "bad_hello",
    "unauthorized",
    "unsupported_version",
    "not_found",
    "conflict",  # the target is in a state the op cannot act on (item.cancel of a running item)
    "overloaded",
    "internal",
]
CLOSING_CODES: frozenset[str] = frozenset(
    {"frame_too_large", "bad_hello", "unauthorized", "unsupported_version"}
)


class ProtocolError(Exception):
    """A frame the broker answers with an `error` frame."""

    def __init__(
        self, code: ErrorCode, message: str, *, field: str | None = None, req: str | None = None
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.field = field
        self.req = req

    @property
    def closes(self) -> bool:
        return self.code in CLOSING_CODES

    def frame(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "error", "code": self.code, "message": self.message}
        if self.req is not None:
            out["req"] = self.req
        if self.field is not None:
            out["field"] = self.field
        return out


class FrameTooLarge(ProtocolError):
    def __init__(self, limit: int, lines_before: list[bytes] | None = None) -> None:
        super().__init__("frame_too_large", f"a frame is longer than the limit of {limit} bytes")
        # Complete lines that came before the oversize one in the same read:
        # they are valid frames and are still answered before the close.
        self.lines_before = lines_before or []


class FrameUnfinished(ProtocolError):
    """A frame begun and not finished in time. `invalid`, as the protocol has no
    code of its own for it, but it closes the connection: the rest of the frame
    may still come, and would be read as a frame of its own."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            "invalid",
            f"a frame was begun and not finished (no newline) within frame_timeout_s"
            f" ({timeout_s:g} s); closing the connection",
        )
        self.timeout_s = timeout_s

    @property
    def closes(self) -> bool:
        return True


class LineBuffer:
    """Splits a byte stream into lines of at most `limit` bytes (the newline excluded)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` completes. On FrameTooLarge the buffer is dropped: the
        stream is out of step for good, and holding up to `limit` bytes for a
        connection about to close is what made each oversize frame cost megabytes."""
        self._buf += data
        lines: list[bytes] = []
        start = 0
        while (nl := self._buf.find(b"\n", start)) != -1:
            if nl - start > self.limit:
                self._buf = bytearray()
                raise FrameTooLarge(self.limit, lines)
            lines.append(bytes(self._buf[start:nl]))
            start = nl + 1
        del self._buf[:start]
        if len(self._buf) > self.limit:
            self._buf = bytearray()
            raise FrameTooLarge(self.limit, lines)
        return lines

    @property
    def pending(self) -> int:
        return len(self._buf)


def encode(frame: dict[str, Any]) -> bytes:
    return orjson.dumps(frame) + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """Parse one line into a frame with a string `type`; check `req`."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("bad_json", f"the line is not valid JSON: {exc.msg}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("bad_json", "a frame must be a JSON object")
    req = obj.get("req")
    if req is not None and not (isinstance(req, str) and len(req) <= MAX_REQ):
        raise ProtocolError(
            "invalid", f"req must be a string of at most {MAX_REQ} characters", field="req"
        )
    frame_type = obj.get("type")
    if not isinstance(frame_type, str):
        raise ProtocolError("invalid", "every frame needs a string 'type'", field="type", req=req)
    return obj


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
