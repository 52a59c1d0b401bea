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
written straight into the OTLP request's bytes (otlp_wire.py) rather than lived
through the SDK's span, context, sampler and processor, and a shipment's spans
leave as one request posted as the SDK's OTLP/HTTP exporter would (otlp_http.py).
What is kept per running turn is bounded, and so is a request.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import time
from collections import OrderedDict
from typing import Any, Protocol

from opentelemetry.sdk.resources import Resource

from broker.observe import otlp_wire as wire
from broker.observe.notes import TurnFacts
from broker.observe.otlp_wire import CLIENT, INTERNAL, SERVER, Key, attribute
from plumbing import logs

log = logs.get("broker.observe")
EXPORT_BATCH = 4096  # spans in one OTLP request at most
OPEN_TURNS = 4096  # turns whose calls are kept until their record comes
OPEN_ITEMS = 16384  # items whose span ids are kept for their turn
CONTENT_CHARS = 8192  # of one message, tool argument or result in a span
LOST_EVERY_S = 60.0  # spans the collector did not take are logged at most this often
# A span's flags: whether its parent is remote is known (and, with 0x200, it is).
LOCAL, REMOTE = 0x100, 0x300
_random = random.Random()


class Sender(Protocol):
    def send(self, request: bytes) -> str | None:
        """None once the collector took `request`, else why not."""

    def close(self) -> None: ...


def _id(kind: str, key: str, size: int) -> bytes:
    digest = hashlib.blake2b(f"{kind}:{key}".encode(), digest_size=size).digest()
    return digest if digest != _ZEROS[size] else b"\0" * (size - 1) + b"\1"


_ZEROS = {8: b"\0" * 8, 16: b"\0" * 16}  # an invalid id


def trace_of(kind: str, key: str) -> bytes:
    """The trace id of a message's ingest (`item`), or of a turn without inputs (`turn`)."""
    return _id(kind, key, 16)


def span_of(kind: str, key: str) -> bytes:
    return _id(f"span.{kind}", key, 8)


_INGEST, _ACK, _INVOKE = wire.name("ingest"), wire.name("ack"), wire.name("invoke_agent")
_OP_INVOKE = attribute("gen_ai.operation.name", "invoke_agent")
_OP_CHAT = attribute("gen_ai.operation.name", "chat")
_OP_TOOL = attribute("gen_ai.operation.name", "execute_tool")
_FUNCTION = attribute("gen_ai.tool.type", "function")
_LINK_INGEST = wire.link_attribute("broker.link", "ingest")
_LINK_ACK = wire.link_attribute("broker.link", "ack")
_CONVERSATION = Key("gen_ai.conversation.id")
_ITEM = Key("broker.item.id")
_TURN = Key("broker.turn.id")
_INPUT_TOKENS = Key("gen_ai.usage.input_tokens")
_OUTPUT_TOKENS = Key("gen_ai.usage.output_tokens")
_CALL_ID = Key("gen_ai.tool.call.id")
_INPUT_MESSAGES = Key("gen_ai.input.messages")
_OUTPUT_MESSAGES = Key("gen_ai.output.messages")
_ARGUMENTS = Key("gen_ai.tool.call.arguments")
_RESULT = Key("gen_ai.tool.call.result")


def _ns(ms: int) -> int:
    return ms * 1_000_000


def _cut(text: str) -> str:
    return text if len(text) <= CONTENT_CHARS else text[:CONTENT_CHARS] + "…"


class Tracing:
    """The hooks' reports made into spans (see the module's docstring)."""

    def __init__(self, sender: Sender, resource: Resource, capture: bool) -> None:
        self.sender = sender
        self.request = wire.Request(resource.attributes, "broker")
        self.capture_content = capture
        self.spans: list[bytes] = []  # of the request being made
        self.lost, self.lost_said_at = 0, -LOST_EVERY_S
        # turn id -> its engine calls (began, ended); its tool calls (name, began, ended, status)
        self._calls: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()
        self._tools: OrderedDict[str, list[tuple[str, int, int, str]]] = OrderedDict()
        # item -> its ids, oldest first (a plain dict's oldest key is found by a scan
        # over the slots its deletions left, which grows until the dict is rebuilt)
        self._items: OrderedDict[str, tuple[bytes, bytes, bytes]] = OrderedDict()

    @classmethod
    def open(cls, endpoint: str, capture_content: bool, service: str, instance: str) -> Tracing:
        """Spans of `service` (this node: `instance`) sent to the OTLP/HTTP `endpoint`."""
        from broker.observe.otlp_http import OtlpHttp

        resource = Resource.create({"service.name": service, "service.instance.id": instance})
        return cls(OtlpHttp.to(endpoint), resource, capture_content)

    def flush(self) -> None:
        """Send the spans made so far; those the collector does not take are counted as
        lost."""
        if not self.spans:
            return
        spans, self.spans = self.spans, []
        failed = self.sender.send(self.request.encode(spans))
        if failed is not None:
            self._lost(len(spans), failed)

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
        self.sender.close()

    def _add(self, span: bytes) -> None:
        self.spans.append(span)
        if len(self.spans) >= EXPORT_BATCH:
            self.flush()

    # -- the hooks --------------------------------------------------------------

    def ingest(self, began_ns: int, acked_ns: int, session: str, item: str) -> None:
        """A message's ingest, handed to the writer at `began_ns`, acked at `acked_ns`."""
        trace, ingest, ack = self._ids_of(item)
        of_item = _ITEM.text(item)
        self._add(
            wire.span(
                trace,
                ingest,
                b"",
                LOCAL,
                _INGEST,
                SERVER,
                began_ns,
                max(began_ns, acked_ns),
                (_CONVERSATION.text(session), of_item),
            )
        )
        self._add(
            wire.span(trace, ack, ingest, LOCAL, _ACK, INTERNAL, acked_ns, acked_ns, (of_item,))
        )

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
                self._items.popitem(last=False)
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
        calls = self._calls.pop(rec.turn_id, None)
        tools = self._tools.pop(rec.turn_id, None)
        inputs = [self._ids_of(item) for item, _ in rec.inputs]
        if inputs:  # in its first message's trace, under that message's ingest
            trace, parent, _ = inputs[0]
            flags = REMOTE
        else:
            trace, parent, flags = trace_of("turn", rec.turn_id), b"", LOCAL
        agent = span_of("turn", rec.turn_id)
        rest = [
            _repeated(rec.engine, rec.type, rec.status, written, rec.model),
            _CONVERSATION.text(rec.session),
            _TURN.text(rec.turn_id),
        ]
        if rec.prompt_tokens is not None:
            rest.append(_INPUT_TOKENS.int(rec.prompt_tokens))
        if rec.completion_tokens is not None:
            rest.append(_OUTPUT_TOKENS.int(rec.completion_tokens))
        if rec.status != "completed":
            rest.append(attribute("error.type", rec.reason or rec.status))
        if self.capture_content:
            rest.append(_INPUT_MESSAGES.text(_messages("user", [text for _, text in rec.inputs])))
            rest.append(_OUTPUT_MESSAGES.text(_messages("assistant", [rec.output])))
        for linked, ingest, ack in inputs:
            rest.append(wire.link(linked, ingest, REMOTE, _LINK_INGEST))
            rest.append(wire.link(linked, ack, REMOTE, _LINK_ACK))
        if rec.status == "failed":
            rest.append(wire.error_status(rec.error or rec.reason or "failed"))
        began = _ns(rec.started_at)
        self._add(
            wire.span(
                trace,
                agent,
                parent,
                flags,
                _INVOKE,
                INTERNAL,
                began,
                max(began, _ns(rec.completed_at)),
                rest,
            )
        )
        if calls:
            self._chats(rec, calls, trace, agent)
        if tools:
            self._tool_spans(rec, tools, trace, agent)

    def _chats(
        self, rec: TurnFacts, calls: list[tuple[int, int]], trace: bytes, agent: bytes
    ) -> None:
        """One `chat` per model call: the engine's own reports of its calls (each with
        its duration) inside the engine call they came from, else the call itself."""
        reported = [data for kind, data in rec.events if kind == "llm"]
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
        stop = data.get("stop_reason")
        rest = [_chat_repeated(model, str(stop) if stop else None)]
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        if isinstance(prompt, int):
            rest.append(_INPUT_TOKENS.int(prompt))
        if isinstance(completion, int):
            rest.append(_OUTPUT_TOKENS.int(completion))
        self._child(trace, agent, _chat_name(model), CLIENT, began, ended, rest)

    def _tool_spans(
        self, rec: TurnFacts, tools: list[tuple[str, int, int, str]], trace: bytes, agent: bytes
    ) -> None:
        recorded = {name: (call_id, args, result) for call_id, name, args, result in rec.tool_calls}
        for name, began, ended, status in tools:
            rest = [_OP_TOOL, attribute("gen_ai.tool.name", name), _FUNCTION]
            call = recorded.get(name)
            if call is not None:
                call_id, args, result = call
                rest.append(_CALL_ID.text(call_id))
                if self.capture_content:
                    rest.append(_ARGUMENTS.text(_cut(args)))
                    rest.append(_RESULT.text(_cut(result)))
            if status != "ok":
                rest.append(attribute("error.type", status))
                rest.append(wire.error_status(status))
            self._child(
                trace, agent, wire.name(f"execute_tool {name}"), INTERNAL, began, ended, rest
            )

    def _child(
        self,
        trace: bytes,
        agent: bytes,
        name: bytes,
        kind: int,
        began: int,
        ended: int,
        rest: list[bytes],
    ) -> None:
        """A span under the turn's `invoke_agent`, from `began` to `ended` (ms)."""
        self._add(
            wire.span(
                trace,
                _random.randbytes(8),
                agent,
                LOCAL,
                name,
                kind,
                _ns(began),
                _ns(max(began, ended)),
                rest,
            )
        )


@functools.lru_cache(maxsize=1024)
def _repeated(engine: str, type: str, status: str, written: str, model: str | None) -> bytes:
    """An `invoke_agent` span's attributes that repeat from turn to turn."""
    return b"".join(
        (
            _OP_INVOKE,
            attribute("gen_ai.provider.name", engine),
            attribute("broker.turn.type", type),
            attribute("broker.turn.status", status),
            attribute("broker.turn.written", written),
            attribute("gen_ai.request.model", model) if model else b"",
        )
    )


@functools.lru_cache(maxsize=1024)
def _chat_repeated(model: str | None, stop_reason: str | None) -> bytes:
    """A `chat` span's attributes that repeat from call to call."""
    return b"".join(
        (
            _OP_CHAT,
            attribute("gen_ai.request.model", model) if model else b"",
            attribute("gen_ai.response.finish_reasons", (stop_reason,)) if stop_reason else b"",
        )
    )


@functools.lru_cache(maxsize=1024)
def _chat_name(model: str | None) -> bytes:
    return wire.name(f"chat {model}" if model else "chat")


def _messages(role: str, texts: list[str | None]) -> str:
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": _cut(t or "")}]} for t in texts]
    )
