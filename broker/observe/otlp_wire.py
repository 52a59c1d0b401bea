"""OTLP trace requests written straight in protobuf's wire format.

A turn's spans are whole when they are made, and most of what they say is the
same from turn to turn (an engine's name, a status, a model), so a span is
written as bytes: what repeats is encoded once, by opentelemetry-proto's own
messages, and kept; only what varies (ids, times, a session, token counts) is
framed here, per span. The bytes are exactly what opentelemetry-proto parses
as the same `ExportTraceServiceRequest` built field by field would be
(tests/unit/test_otlp_wire.py checks it against the library). Text is UTF-8;
a lone surrogate becomes U+FFFD, where the library would refuse the whole span.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Mapping

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_I = struct.Struct("<I").pack
# A span's fixed fields, tag and all: trace id (1) and span id (2); start (7) and end (8)
# times; flags (16).
_IDS = struct.Struct("<H16sH8s").pack
_TIMES = struct.Struct("<BQBQ").pack
_FLAGS = struct.Struct("<HI").pack
INTERNAL, SERVER, CLIENT = (
    Span.SpanKind.SPAN_KIND_INTERNAL,
    Span.SpanKind.SPAN_KIND_SERVER,
    Span.SpanKind.SPAN_KIND_CLIENT,
)
# Tags (field number << 3 | wire type) of the fields written here.
_SPAN_ATTRIBUTE = b"\x4a"  # Span.attributes, 9
_LINK_ATTRIBUTE = b"\x22"  # Span.Link.attributes, 4


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = 1 << 14  # the sizes and counts a span's fields mostly have: varints of 1-2 bytes
_VARINTS = [_varint(n) for n in range(_SMALL)]


def varint(n: int) -> bytes:
    """`n` as a protobuf varint (a negative int64 as its 64-bit two's complement)."""
    return _VARINTS[n] if 0 <= n < _SMALL else _varint(n)


def field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(body)) + body


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text).encode()


def _any_value(value: object) -> AnyValue:
    out = AnyValue()
    if isinstance(value, str):
        out.string_value = _utf8(value).decode()
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, (list, tuple)):
        for v in value:
            out.array_value.values.add().string_value = _utf8(str(v)).decode()
    else:
        out.string_value = _utf8(str(value)).decode()
    return out


def key_value(key: str, value: object) -> bytes:
    """A `KeyValue` message's bytes (a list or tuple value: an array of strings)."""
    return KeyValue(key=key, value=_any_value(value)).SerializeToString()


@functools.lru_cache(maxsize=4096, typed=True)
def attribute(key: str, value: str | int | float | bool | tuple[str, ...]) -> bytes:
    """A span's attribute whose value repeats (kept once made)."""
    return field(_SPAN_ATTRIBUTE, key_value(key, value))


def link_attribute(key: str, value: str) -> bytes:
    return field(_LINK_ATTRIBUTE, key_value(key, value))


class Key:
    """An attribute key, encoded once, for values that vary from span to span."""

    __slots__ = ("prefix",)

    def __init__(self, key: str) -> None:
        self.prefix = field(b"\x0a", key.encode())

    def text(self, value: str) -> bytes:
        try:
            v = value.encode()
        except UnicodeEncodeError:
            v = _utf8(value)
        n = len(v)
        if n > 100:
            any_value = b"\x0a" + varint(n) + v
            kv = self.prefix + b"\x12" + varint(len(any_value)) + any_value
            return _SPAN_ATTRIBUTE + varint(len(kv)) + kv
        size = len(self.prefix) + n + 4  # below _SMALL: each size is one table entry
        return b"".join(
            (
                _SPAN_ATTRIBUTE,
                _VARINTS[size],
                self.prefix,
                b"\x12",
                _VARINTS[n + 2],
                b"\x0a",
                _VARINTS[n],
                v,
            )
        )

    def int(self, value: int) -> bytes:
        any_value = b"\x18" + varint(value)
        kv = self.prefix + b"\x12" + _VARINTS[len(any_value)] + any_value
        return _SPAN_ATTRIBUTE + varint(len(kv)) + kv


def name(text: str) -> bytes:
    """A span's name field (5)."""
    return field(b"\x2a", _utf8(text))


_KINDS: dict[int, bytes] = {kind: b"\x30" + varint(kind) for kind in (INTERNAL, SERVER, CLIENT)}
_ERROR = b"\x18" + varint(Status.StatusCode.STATUS_CODE_ERROR)


def error_status(message: str) -> bytes:
    """A span's status field (15): an error, saying `message`."""
    return field(b"\x7a", field(b"\x12", _utf8(message)) + _ERROR)


def link(trace: bytes, span_id: bytes, flags: int, attributes: bytes) -> bytes:
    """A span's link field (13)."""
    return field(
        b"\x6a", b"\x0a\x10" + trace + b"\x12\x08" + span_id + attributes + b"\x35" + _I(flags)
    )


def span(
    trace: bytes,
    span_id: bytes,
    parent: bytes,
    flags: int,
    name_field: bytes,
    kind: int,
    began_ns: int,
    ended_ns: int,
    rest: Iterable[bytes],
) -> bytes:
    """A span, as a field of its `ScopeSpans` (2): 16-byte `trace`, 8-byte ids (`parent`
    empty at a trace's root), its `name` field, and `rest`: its attribute, link and status
    fields."""
    body = b"".join(
        (
            _IDS(0x100A, trace, 0x0812, span_id),
            b"\x22\x08" + parent if parent else b"",
            name_field,
            _KINDS[kind],
            _TIMES(0x39, began_ns, 0x41, ended_ns),
            *rest,
            _FLAGS(0x0185, flags),  # flags, 16, fixed32
        )
    )
    n = len(body)
    return b"\x12" + (_VARINTS[n] if n < _SMALL else _varint(n)) + body


class Request:
    """An `ExportTraceServiceRequest`'s frame: one resource, one scope, its spans."""

    def __init__(self, resource: Mapping[str, object], scope: str) -> None:
        proto = Resource()
        for key, value in resource.items():
            proto.attributes.append(KeyValue(key=key, value=_any_value(value)))
        self.resource = field(b"\x0a", proto.SerializeToString())
        self.scope = field(b"\x0a", InstrumentationScope(name=scope).SerializeToString())

    def encode(self, spans: list[bytes]) -> bytes:
        scope_spans = field(b"\x12", self.scope + b"".join(spans))
        return field(b"\x0a", self.resource + scope_spans)
