"""The SDK's value types: acks, replies, errors and tuning. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self


@dataclass(frozen=True, slots=True)
class Ack:
    """The broker committed an inbound message (`duplicate`: it had it already)."""

    msg_id: str
    session: str
    item: str
    duplicate: bool

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Ack:
        return cls(
            str(frame["msg_id"]),
            str(frame["session"]),
            str(frame["item"]),
            bool(frame.get("duplicate", False)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {"session": self.session, "item": self.item, "duplicate": self.duplicate}


@dataclass(frozen=True, slots=True)
class Delta:
    """A chunk of a reply being generated (best effort: some may be missing)."""

    out_id: str
    session: str
    text: str

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Delta:
        return cls(str(frame["out_id"]), str(frame["session"]), str(frame["text"]))


@dataclass(frozen=True, slots=True)
class Deliver:
    """A whole reply: `status` is `final`, `aborted` or `failed`; `turn` is
    None for the answer to a chat command. `frame` is the frame as received."""

    out_id: str
    session: str
    turn: str | None
    peer_kind: str
    peer_id: str | None
    thread_id: str | None
    in_reply_to: tuple[str, ...]
    text: str
    status: str
    frame: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Deliver:
        return cls(
            out_id=str(frame["out_id"]),
            session=str(frame["session"]),
            turn=_opt(frame.get("turn")),
            peer_kind=str(frame.get("peer_kind", "dm")),
            peer_id=_opt(frame.get("peer_id")),
            thread_id=_opt(frame.get("thread_id")),
            in_reply_to=tuple(str(m) for m in frame.get("in_reply_to") or ()),
            text=str(frame["text"]),
            status=str(frame.get("status", "final")),
            frame=frame,
        )


Reply = Delta | Deliver


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


class AdapterError(Exception):
    """An error with the broker's vocabulary: `code`, `message`, `field`."""

    def __init__(
        self,
        code: str,
        message: str,
        field: str | None = None,
        frame: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" + (f" (field {field})" if field else ""))
        self.code = code
        self.message = message
        self.field = field
        self.frame = frame or {}

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Self:
        field_name = frame.get("field")
        return cls(
            str(frame.get("code", "internal")),
            str(frame.get("message", "")),
            field_name if isinstance(field_name, str) else None,
            frame,
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


class MessageRejected(AdapterError):
    """The broker refused an inbound message (`invalid`, `internal`, …)."""


class HandshakeRefused(AdapterError):
    """The broker refused the hello (`unauthorized`, `bad_hello`, `unsupported_version`).
    Not retried: it will not change by itself."""


class BrokerUnreachable(AdapterError):
    """The first connection failed (socket missing, nobody listening, timeout)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: `initial * factor**attempt`, capped at `maximum`, of
    which the fraction `jitter` is random (so clients do not retry in step)."""

    initial: float = 0.05
    factor: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.5

    def delay(self, attempt: int, rand: float) -> float:
        """The wait before retry number `attempt` (from 0); `rand` is in [0, 1)."""
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return base * (1.0 - self.jitter * rand)


@dataclass(frozen=True, slots=True)
class Tuning:
    """Knobs with sensible defaults; every wait of the SDK is bounded by one of them
    except the waits the caller owns (`send`, `replies`, `wait_connected`)."""

    reconnect: Backoff = Backoff()
    overload: Backoff = Backoff(initial=0.02, maximum=1.0)
    connect_timeout: float = 5.0  # connect and handshake
    write_timeout: float = 30.0  # one write; past it the connection is dropped
    close_timeout: float = 2.0  # flushing queued frames when the block ends
    stable_s: float = 1.0  # a connection that lived this long resets the backoff
    outbox_size: int = 256  # frames queued for the writer
    max_frame_bytes: int = 1 << 20  # the broker's default max_frame_bytes
    seen_limit: int = 10_000  # out_ids remembered to drop repeated delivers
