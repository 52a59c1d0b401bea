"""Turns as OpenTelemetry traces in the GenAI conventions, sent over OTLP/HTTP.

This runs in the trace exporter's own process (trace_export.py), fed the hooks'
reports in batches; the daemon's process never builds a span.

A message's ingest (handed to the writer until its ack) is a span with an
`ack` child. A turn is one `invoke_agent` span, made when its record is
written, with a `chat` child per model call and an `execute_tool` child per
broker tool call, at the times they ran; it is a child of its first input's
ingest, in that trace, and links to the ingest and ack of every input. Trace
and span ids are derived from the item's and the turn's ids, not drawn at
random: whichever process makes a span (the node that took the message, the
node that ran the turn on Temporal) names the same trace and the same parent,
so they join without passing a context around. Message text, tool arguments
and results go into spans only with `capture_content`.

Every span is whole when it is made (its times are in the notes), so it is
written straight into the OTLP request (opentelemetry-proto's messages) rather
than lived through the SDK's span, context, sampler and processor, and a
shipment's spans leave as one request through the SDK's OTLP/HTTP exporter's
connection (its endpoint, headers, certificates and compression, as the
`OTEL_EXPORTER_OTLP_*` variables set them). What is kept per running turn is
bounded, and so is a request.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import OrderedDict
from typing import Any

import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource

from broker.observe.notes import TurnFacts
from plumbing import logs

log = logs.get("broker.observe")
EXPORT_TIMEOUT_S = 3.0
EXPORT_BATCH = 4096  # spans in one OTLP request at most
OPEN_TURNS = 4096  # turns whose calls are kept until their record comes
OPEN_ITEMS = 16384  # items whose span ids are kept for their turn
CONTENT_CHARS = 8192  # of one message, tool argument or result in a span
LOST_EVERY_S = 60.0  # spans the collector did not take are logged at most this often
RETRY_STATUS = frozenset({429, 502, 503, 504})
# A span's flags: whether its parent is remote is known (and, with 0x200, it is).
LOCAL, REMOTE = 0x100, 0x300
INTERNAL, SERVER, CLIENT = (
    Span.SpanKind.SPAN_KIND_INTERNAL,
    Span.SpanKind.SPAN_KIND_SERVER,
    Span.SpanKind.SPAN_KIND_CLIENT,
)
_random = random.Random()


def _id(kind: str, key: str, size: int) -> bytes:
    digest = hashlib.blake2b(f"{kind}:{key}".encode(), digest_size=size).digest()
    return digest if any(digest) else b"\0" * (size - 1) + b"\1"


def trace_of(kind: str, key: str) -> bytes:
    """The trace id of a message's ingest (`item`), or of a turn without inputs (`turn`)."""
    return _id(kind, key, 16)


def span_of(kind: str, key: str) -> bytes:
    return _id(f"span.{kind}", key, 8)


def _const(key: str, value: str) -> KeyValue:
    kv = KeyValue(key=key)
    kv.value.string_value = value
    return kv


_INVOKE = _const("gen_ai.operation.name", "invoke_agent")
_CHAT = _const("gen_ai.operation.name", "chat")
_TOOL = _const("gen_ai.operation.name", "execute_tool")
_FUNCTION = _const("gen_ai.tool.type", "function")
_LINK_INGEST = _const("broker.link", "ingest")
_LINK_ACK = _const("broker.link", "ack")


def _set(span: Span | ProtoResource, key: str, value: object) -> None:
    kv = span.attributes.add()
    kv.key = key
    if isinstance(value, str):
        kv.value.string_value = value
    elif isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    elif isinstance(value, (list, tuple)):
        for v in value:
            kv.value.array_value.values.add().string_value = str(v)
    else:
        kv.value.string_value = str(value)


def _text(span: Span, key: str, value: str) -> None:
    kv = span.attributes.add()
    kv.key = key
    kv.value.string_value = value


def _error(span: Span, message: str) -> None:
    span.status.code = Status.StatusCode.STATUS_CODE_ERROR
    span.status.message = message


def _ns(ms: int) -> int:
    return ms * 1_000_000


def _cut(text: str) -> str:
    return text if len(text) <= CONTENT_CHARS else text[:CONTENT_CHARS] + "…"


class Tracing:
    """The hooks' reports made into spans (see the module's docstring)."""

    def __init__(self, exporter: OTLPSpanExporter, resource: Resource, capture: bool) -> None:
        self.exporter = exporter
        self.resource = ProtoResource()
        for key, value in resource.attributes.items():
            _set(self.resource, key, value)
        self.capture_content = capture
        self.made = 0  # spans in the request being made
        self.lost, self.lost_said_at = 0, -LOST_EVERY_S
        self._start()
        # turn id -> its engine calls (began, ended); its tool calls (name, began, ended, status)
        self._calls: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()
        self._tools: OrderedDict[str, list[tuple[str, int, int, str]]] = OrderedDict()
        self._items: dict[str, tuple[bytes, bytes, bytes]] = {}  # item -> its ids

    @classmethod
    def open(cls, endpoint: str, capture_content: bool, service: str, instance: str) -> Tracing:
        """Spans of `service` (this node: `instance`) sent to the OTLP/HTTP `endpoint`."""
        resource = Resource.create({"service.name": service, "service.instance.id": instance})
        exporter = OTLPSpanExporter(
            endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_S
        )
        return cls(exporter, resource, capture_content)

    def _start(self) -> None:
        self.request = ExportTraceServiceRequest()
        spans = self.request.resource_spans.add()
        spans.resource.CopyFrom(self.resource)
        scope = spans.scope_spans.add()
        scope.scope.name = "broker"
        self.spans = scope.spans
        self.made = 0

    def flush(self) -> None:
        """Send the spans made so far, within the exporter's timeout; those the collector
        does not take are counted as lost."""
        if not self.made:
            return
        data, made = self.request.SerializeToString(), self.made
        self._start()
        deadline = time.monotonic() + EXPORT_TIMEOUT_S
        backoff = 0.25
        while True:
            try:
                answer = self.exporter._export(data, max(0.1, deadline - time.monotonic()))
                if answer.ok:
                    return
                retry, reason = answer.status_code in RETRY_STATUS, f"HTTP {answer.status_code}"
            except requests.RequestException as exc:
                retry, reason = isinstance(exc, requests.ConnectionError), str(exc)
            if not retry or time.monotonic() + backoff > deadline:
                self._lost(made, reason)
                return
            time.sleep(backoff)
            backoff *= 2

    def _lost(self, spans: int, reason: str) -> None:
        """Count spans the collector did not take; say so at most once a `LOST_EVERY_S`."""
        self.lost += spans
        now = time.monotonic()
        if now >= self.lost_said_at + LOST_EVERY_S:
            log.warning("spans not exported", spans=self.lost, reason=reason)
            self.lost, self.lost_said_at = 0, now

    def shutdown(self) -> None:
        """Send what is made and stop."""
        self.flush()
        self.exporter.shutdown()  # type: ignore[no-untyped-call]

    def _span(
        self,
        name: str,
        trace: bytes,
        span_id: bytes,
        parent: bytes,
        flags: int,
        kind: Any,
        began_ns: int,
        ended_ns: int,
    ) -> Span:
        if self.made >= EXPORT_BATCH:
            self.flush()
        self.made += 1
        span = self.spans.add()
        span.trace_id = trace
        span.span_id = span_id
        if parent:
            span.parent_span_id = parent
        span.flags = flags
        span.name = name
        span.kind = kind
        span.start_time_unix_nano = began_ns
        span.end_time_unix_nano = max(began_ns, ended_ns)
        return span

    # -- the hooks --------------------------------------------------------------

    def ingest(self, began_ns: int, acked_ns: int, session: str, item: str) -> None:
        """A message's ingest, handed to the writer at `began_ns`, acked at `acked_ns`."""
        trace, ingest, ack = self._ids_of(item)
        span = self._span("ingest", trace, ingest, b"", LOCAL, SERVER, began_ns, acked_ns)
        _text(span, "gen_ai.conversation.id", session)
        _text(span, "broker.item.id", item)
        span = self._span("ack", trace, ack, ingest, LOCAL, INTERNAL, acked_ns, 0)
        _text(span, "broker.item.id", item)

    def _ids_of(self, item: str) -> tuple[bytes, bytes, bytes]:
        """An item's trace, ingest span and ack span ids, kept for its turn to come."""
        found = self._items.get(item)
        if found is None:
            found = self._items[item] = (
                trace_of("item", item),
                span_of("ingest", item),
                span_of("ack", item),
            )
            if len(self._items) > OPEN_ITEMS:
                del self._items[next(iter(self._items))]
        return found

    def engine_call(self, turn: str, began_ms: int, ended_ms: int) -> None:
        self._kept(self._calls, turn).append((began_ms, ended_ms))

    def tool_call(self, turn: str, name: str, began_ms: int, ended_ms: int, status: str) -> None:
        self._kept(self._tools, turn).append((name, began_ms, ended_ms, status))

    @staticmethod
    def _kept(table: OrderedDict[str, list[Any]], turn: str) -> list[Any]:
        found = table.get(turn)
        if found is None:
            found = table[turn] = []
            while len(table) > OPEN_TURNS:  # a turn whose record never came
                table.popitem(last=False)
        return found

    def turn(self, rec: TurnFacts, written: str) -> None:
        calls = self._calls.pop(rec.turn_id, [])
        tools = self._tools.pop(rec.turn_id, [])
        inputs = [self._ids_of(i.id) for i in rec.inputs]
        if inputs:  # in its first message's trace, under that message's ingest
            trace, parent, _ = inputs[0]
            flags = REMOTE
        else:
            trace, parent, flags = trace_of("turn", rec.turn_id), b"", LOCAL
        agent = span_of("turn", rec.turn_id)
        span = self._span(
            "invoke_agent",
            trace,
            agent,
            parent,
            flags,
            INTERNAL,
            _ns(rec.started_at),
            _ns(max(rec.completed_at, rec.started_at)),
        )
        for linked, ingest, ack in inputs:
            for span_id, mark in ((ingest, _LINK_INGEST), (ack, _LINK_ACK)):
                link = span.links.add()
                link.trace_id = linked
                link.span_id = span_id
                link.flags = REMOTE
                link.attributes.append(mark)
        span.attributes.append(_INVOKE)
        _text(span, "gen_ai.conversation.id", rec.session)
        _text(span, "gen_ai.provider.name", rec.engine)
        _text(span, "broker.turn.id", rec.turn_id)
        _text(span, "broker.turn.type", rec.type)
        _text(span, "broker.turn.status", rec.status)
        _text(span, "broker.turn.written", written)
        if rec.model:
            _set(span, "gen_ai.request.model", rec.model)
        if rec.prompt_tokens is not None:
            _set(span, "gen_ai.usage.input_tokens", rec.prompt_tokens)
        if rec.completion_tokens is not None:
            _set(span, "gen_ai.usage.output_tokens", rec.completion_tokens)
        if rec.status != "completed":
            _set(span, "error.type", rec.reason or rec.status)
        if rec.status == "failed":
            _error(span, rec.error or rec.reason or "failed")
        if self.capture_content:
            _set(span, "gen_ai.input.messages", _messages("user", [i.text for i in rec.inputs]))
            _set(span, "gen_ai.output.messages", _messages("assistant", [rec.output]))
        self._chats(rec, calls, trace, agent)
        self._tool_spans(rec, tools, trace, agent)

    def _chats(
        self, rec: TurnFacts, calls: list[tuple[int, int]], trace: bytes, agent: bytes
    ) -> None:
        """One `chat` per model call: the engine's own reports of its calls (each with
        its duration) inside the engine call they came from, else the call itself."""
        reported = [data for kind, data in rec.events if kind == "llm"]
        if not calls:
            return
        per_call = max(1, len(reported) // len(calls)) if reported else 1
        for n, (began, ended) in enumerate(calls):
            mine = reported[n * per_call : (n + 1) * per_call] if reported else []
            if n == len(calls) - 1:
                mine = reported[n * per_call :]
            if not mine:
                mine = [{"model": rec.model}]
            cursor = began
            for data in mine:
                took = data.get("duration_ms")
                end = min(ended, cursor + took) if isinstance(took, int) else ended
                self._chat(data, rec.model, cursor, end, trace, agent)
                cursor = end

    def _chat(
        self,
        data: dict[str, Any],
        model: str | None,
        began: int,
        ended: int,
        trace: bytes,
        agent: bytes,
    ) -> None:
        model = data.get("model") or model
        span = self._span(
            f"chat {model}" if model else "chat",
            trace,
            _random.randbytes(8),
            agent,
            LOCAL,
            CLIENT,
            _ns(began),
            _ns(ended),
        )
        span.attributes.append(_CHAT)
        if model:
            _set(span, "gen_ai.request.model", model)
        for ours, theirs in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            if isinstance(data.get(ours), int):
                _set(span, theirs, data[ours])
        if data.get("stop_reason"):
            _set(span, "gen_ai.response.finish_reasons", [str(data["stop_reason"])])

    def _tool_spans(
        self, rec: TurnFacts, tools: list[tuple[str, int, int, str]], trace: bytes, agent: bytes
    ) -> None:
        recorded = {call.name: call for call in rec.tool_calls}
        for name, began, ended, status in tools:
            span = self._span(
                f"execute_tool {name}",
                trace,
                _random.randbytes(8),
                agent,
                LOCAL,
                INTERNAL,
                _ns(began),
                _ns(ended),
            )
            span.attributes.append(_TOOL)
            _set(span, "gen_ai.tool.name", name)
            span.attributes.append(_FUNCTION)
            call = recorded.get(name)
            if call is not None:
                _set(span, "gen_ai.tool.call.id", call.id)
                if self.capture_content:
                    _set(span, "gen_ai.tool.call.arguments", _cut(call.arguments))
                    _set(span, "gen_ai.tool.call.result", _cut(call.result))
            if status != "ok":
                _set(span, "error.type", status)
                _error(span, status)


def _messages(role: str, texts: list[str | None]) -> str:
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": _cut(t or "")}]} for t in texts]
    )
