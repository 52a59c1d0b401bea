"""Wire protocol v1's framing: lines of JSON, error frames and the errors that
close a connection. No pydantic: the client side (brokerctl, the adapters) reads
and writes frames with this alone, and starts without building the models.

A frame is one JSON object on one line. A line longer than `max_frame_bytes` is an
error that closes the connection; every other bad frame is answered and the
connection stays open.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from plumbing import redact

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
    "forbidden",  # an op above the operator's role (round 3)
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
        message = redact.text(self.message)  # an error message carries no secret
        out: dict[str, Any] = {"type": "error", "code": self.code, "message": message}
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
