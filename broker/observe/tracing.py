"""Turns as OpenTelemetry traces in the GenAI conventions, sent over OTLP/HTTP.

This runs in the trace exporter's own process (trace_export.py), fed the hooks'
reports; the daemon's process never builds a span.

A turn is one `invoke_agent` span, made when its record is written, with a
`chat` child per model call and an `execute_tool` child per broker tool call,
at the times they ran. Each message's ingest (handed to the writer until its
ack) is a span with an `ack` child; the turn's span links to those of its
inputs. Trace and span ids are derived from the turn's and the item's ids, not
drawn at random: whichever process makes a span (the node that took the
message, the node that ran the turn on Temporal) names the same trace, so they
join without passing a context around. Message text, tool arguments and
results go into spans only with `capture_content`. Spans leave in batches
from the SDK's own thread, at most `EXPORT_DELAY_MS` after they end; nothing
here waits on the network, and what is kept per running turn is bounded.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from broker.observe.notes import TurnFacts

EXPORT_DELAY_MS = 1000  # a span leaves at most this long after it ends (the contract: 5 s)
EXPORT_TIMEOUT_S = 3.0
OPEN_TURNS = 4096  # turns whose calls are kept until their record comes
CONTENT_CHARS = 8192  # of one message, tool argument or result in a span


class _Ids(IdGenerator):
    """Random ids, but for the span about to start when `take` was given ids."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.trace_id: int | None = None
        self.span_id: int | None = None

    def is_trace_id_random(self) -> bool:
        return False

    def generate_trace_id(self) -> int:
        found, self.trace_id = self.trace_id, None
        return found if found is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        found, self.span_id = self.span_id, None
        return found if found is not None else self._random.generate_span_id()


def _id(kind: str, key: str, bits: int) -> int:
    digest = hashlib.blake2b(f"{kind}:{key}".encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "big") or 1


def trace_of(kind: str, key: str) -> int:
    """The trace id of a turn (`turn`) or a message's ingest (`item`)."""
    return _id(kind, key, 128)


def span_of(kind: str, key: str) -> int:
    return _id(f"span.{kind}", key, 64)


def _linked(kind: str, item: str) -> Link:
    ctx = SpanContext(
        trace_of("item", item),
        span_of(kind, item),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return Link(ctx, {"broker.link": kind})


def _ns(ms: int) -> int:
    return ms * 1_000_000


def _cut(text: str) -> str:
    return text if len(text) <= CONTENT_CHARS else text[:CONTENT_CHARS] + "…"


class Tracing:
    """The hooks' reports made into spans (see the module's docstring)."""

    def __init__(self, provider: TracerProvider, ids: _Ids, capture_content: bool) -> None:
        self.provider = provider
        self.ids = ids
        self.tracer = provider.get_tracer("broker")
        self.capture_content = capture_content
        # turn id -> its engine calls (began, ended), its model calls as reported live
        # (ended, payload), its tool calls (name, began, ended, status)
        self._calls: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()
        self._tools: OrderedDict[str, list[tuple[str, int, int, str]]] = OrderedDict()

    @classmethod
    def open(
        cls, endpoint: str, capture_content: bool, service: str, instance: str, exporter: Any = None
    ) -> Tracing:
        """Spans of `service` (this node: `instance`) sent to the OTLP/HTTP `endpoint`."""
        resource = Resource.create({"service.name": service, "service.instance.id": instance})
        ids = _Ids()
        provider = TracerProvider(resource=resource, id_generator=ids)
        if exporter is None:
            exporter = OTLPSpanExporter(
                endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_S
            )
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter, schedule_delay_millis=EXPORT_DELAY_MS, export_timeout_millis=3000
            )
        )
        return cls(provider, ids, capture_content)

    def shutdown(self) -> None:
        """Send what is buffered (bounded by the exporter's timeout) and stop."""
        self.provider.shutdown()

    # -- the hooks --------------------------------------------------------------

    def ingest(self, began_ns: int, acked_ns: int, session: str, item: str) -> None:
        """A message's ingest, handed to the writer at `began_ns`, acked at `acked_ns`."""
        self.ids.trace_id, self.ids.span_id = trace_of("item", item), span_of("ingest", item)
        ingest = self.tracer.start_span(
            "ingest",
            kind=SpanKind.SERVER,
            start_time=began_ns,
            attributes={"gen_ai.conversation.id": session, "broker.item.id": item},
        )
        self.ids.span_id = span_of("ack", item)
        ack = self.tracer.start_span(
            "ack",
            context=trace.set_span_in_context(ingest),
            start_time=acked_ns,
            attributes={"broker.item.id": item},
        )
        ack.end(acked_ns)
        ingest.end(acked_ns)

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
        self.ids.trace_id = trace_of("turn", rec.turn_id)
        self.ids.span_id = span_of("turn", rec.turn_id)
        links = [_linked(kind, i.id) for i in rec.inputs for kind in ("ingest", "ack")]
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": rec.session,
            "gen_ai.provider.name": rec.engine,
            "broker.turn.id": rec.turn_id,
            "broker.turn.type": rec.type,
            "broker.turn.status": rec.status,
            "broker.turn.written": written,
        }
        if rec.model:
            attrs["gen_ai.request.model"] = rec.model
        if rec.prompt_tokens is not None:
            attrs["gen_ai.usage.input_tokens"] = rec.prompt_tokens
        if rec.completion_tokens is not None:
            attrs["gen_ai.usage.output_tokens"] = rec.completion_tokens
        if rec.status != "completed":
            attrs["error.type"] = rec.reason or rec.status
        if self.capture_content:
            attrs["gen_ai.input.messages"] = json.dumps(
                [
                    {"role": "user", "parts": [{"type": "text", "content": _cut(i.text or "")}]}
                    for i in rec.inputs
                ]
            )
            attrs["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": _cut(rec.output)}]}]
            )
        agent = self.tracer.start_span(
            "invoke_agent",
            kind=SpanKind.INTERNAL,
            start_time=_ns(rec.started_at),
            attributes=attrs,
            links=links,
        )
        if rec.status == "failed":
            agent.set_status(Status(StatusCode.ERROR, rec.error or rec.reason or "failed"))
        parent = trace.set_span_in_context(agent)
        self._chats(rec, calls, parent)
        self._tool_spans(rec, tools, parent)
        agent.end(_ns(max(rec.completed_at, rec.started_at)))

    def _chats(self, rec: TurnFacts, calls: list[tuple[int, int]], parent: Any) -> None:
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
                self._chat(data, rec.model, cursor, end, parent)
                cursor = end

    def _chat(
        self, data: dict[str, Any], model: str | None, began: int, ended: int, parent: Any
    ) -> None:
        model = data.get("model") or model
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        if model:
            attrs["gen_ai.request.model"] = model
        for ours, theirs in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            if isinstance(data.get(ours), int):
                attrs[theirs] = data[ours]
        if data.get("stop_reason"):
            attrs["gen_ai.response.finish_reasons"] = [str(data["stop_reason"])]
        span = self.tracer.start_span(
            f"chat {model}" if model else "chat",
            context=parent,
            kind=SpanKind.CLIENT,
            start_time=_ns(began),
            attributes=attrs,
        )
        span.end(_ns(max(began, ended)))

    def _tool_spans(
        self, rec: TurnFacts, tools: list[tuple[str, int, int, str]], parent: Any
    ) -> None:
        recorded = {call.name: call for call in rec.tool_calls}
        for name, began, ended, status in tools:
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "function",
            }
            call = recorded.get(name)
            if call is not None:
                attrs["gen_ai.tool.call.id"] = call.id
                if self.capture_content:
                    attrs["gen_ai.tool.call.arguments"] = _cut(call.arguments)
                    attrs["gen_ai.tool.call.result"] = _cut(call.result)
            if status != "ok":
                attrs["error.type"] = status
            span = self.tracer.start_span(
                f"execute_tool {name}",
                context=parent,
                kind=SpanKind.INTERNAL,
                start_time=_ns(began),
                attributes=attrs,
            )
            if status != "ok":
                span.set_status(Status(StatusCode.ERROR, status))
            span.end(_ns(max(began, ended)))
