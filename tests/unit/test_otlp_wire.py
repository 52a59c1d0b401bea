"""OTLP requests written as bytes parse, with opentelemetry-proto, as the same messages
built field by field; and a turn's spans carry every attribute of the GenAI conventions."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span, Status
from opentelemetry.sdk.resources import Resource

from broker.observe import otlp_wire as wire
from broker.observe.notes import as_facts
from broker.observe.trace_export import frame, serve
from broker.observe.tracing import OPEN_ITEMS, Tracing, span_of, trace_of

INT64 = st.integers(-(2**63), 2**63 - 1)
ID = st.binary(min_size=8, max_size=8)
Value = str | int | float | bool | tuple[str, ...]
VALUES = st.one_of(
    st.text(max_size=300),
    INT64,
    st.floats(allow_nan=False),
    st.booleans(),
    st.tuples(st.text(max_size=20), st.text(max_size=20)),
)


def any_value(value: Value) -> AnyValue:
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    out = AnyValue()
    for v in value:
        out.array_value.values.add().string_value = v
    return out


@given(
    trace=st.binary(min_size=16, max_size=16),
    span_id=ID,
    parent=st.one_of(st.just(b""), ID),
    flags=st.sampled_from([0x100, 0x300]),
    name=st.text(max_size=200),
    kind=st.sampled_from([wire.INTERNAL, wire.SERVER, wire.CLIENT]),
    began=st.integers(0, 2**64 - 1),
    ended=st.integers(0, 2**64 - 1),
    constant=st.lists(st.tuples(st.text(min_size=1, max_size=40), VALUES), max_size=4),
    texts=st.lists(st.tuples(st.text(min_size=1, max_size=40), st.text(max_size=400)), max_size=3),
    ints=st.lists(st.tuples(st.text(min_size=1, max_size=40), INT64), max_size=3),
    links=st.lists(st.tuples(st.binary(min_size=16, max_size=16), ID, st.text(max_size=10))),
    error=st.one_of(st.none(), st.text(max_size=200)),
)  # fmt: skip
def test_a_span_parses_as_the_library_builds_it(
    trace: bytes,
    span_id: bytes,
    parent: bytes,
    flags: int,
    name: str,
    kind: int,
    began: int,
    ended: int,
    constant: list[tuple[str, Value]],
    texts: list[tuple[str, str]],
    ints: list[tuple[str, int]],
    links: list[tuple[bytes, bytes, str]],
    error: str | None,
) -> None:
    rest = [wire.attribute(k, v) for k, v in constant]
    rest += [wire.Key(k).text(v) for k, v in texts]
    rest += [wire.Key(k).int(v) for k, v in ints]
    rest += [wire.link(t, s, 0x300, wire.link_attribute("broker.link", m)) for t, s, m in links]
    if error is not None:
        rest.append(wire.error_status(error))
    ours = ScopeSpans.FromString(
        wire.span(trace, span_id, parent, flags, wire.name(name), kind, began, ended, rest)
    )
    theirs = Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent,
        flags=flags,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=began,
        end_time_unix_nano=ended,
        attributes=[KeyValue(key=k, value=any_value(v)) for k, v in [*constant, *texts, *ints]],
    )
    for t, s, m in links:
        link = theirs.links.add(trace_id=t, span_id=s, flags=0x300)
        link.attributes.add(key="broker.link", value=AnyValue(string_value=m))
    if error is not None:
        theirs.status.CopyFrom(Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=error))
    assert list(ours.spans) == [theirs]
    assert ours.spans[0].SerializeToString() == theirs.SerializeToString()


def test_a_request_parses_as_the_library_builds_it() -> None:
    attributes: dict[str, Value] = {"service.name": "brokerd", "node": 3, "on": True, "share": 0.5}
    spans = [
        wire.span(b"t" * 16, b"s" * 8, b"", 0x100, wire.name(f"s{n}"), wire.SERVER, n, n, ())
        for n in range(3)
    ]
    ours = ExportTraceServiceRequest.FromString(wire.Request(attributes, "broker").encode(spans))
    theirs = ExportTraceServiceRequest()
    rs = theirs.resource_spans.add()
    rs.resource.CopyFrom(
        ProtoResource(
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]
        )
    )
    ss = rs.scope_spans.add(scope=InstrumentationScope(name="broker"))
    for n in range(3):
        ss.spans.add(
            trace_id=b"t" * 16,
            span_id=b"s" * 8,
            flags=0x100,
            name=f"s{n}",
            kind=wire.SERVER,
            start_time_unix_nano=n,
            end_time_unix_nano=n,
        )
    assert ours == theirs


def test_a_lone_surrogate_becomes_a_replacement_character() -> None:
    span = ScopeSpans.FromString(
        wire.span(
            b"t" * 16, b"s" * 8, b"", 0x100, wire.name("a\ud800b"), wire.INTERNAL, 0, 0,
            [wire.Key("k").text("x\udfffy"), wire.attribute("c", "\ud800")],
        )
    ).spans[0]  # fmt: skip
    assert span.name == "a\ufffdb"
    assert [kv.value.string_value for kv in span.attributes] == ["x\ufffdy", "\ufffd"]


class Taken:
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    def send(self, request: bytes) -> str | None:
        self.requests.append(ExportTraceServiceRequest.FromString(request))
        return None

    def close(self) -> None:
        pass

    def spans(self) -> dict[str, list[Span]]:
        out: dict[str, list[Span]] = {}
        for req in self.requests:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.setdefault(span.name, []).append(span)
        return out


def attrs(span: Span | Span.Link) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            out[kv.key] = getattr(kv.value, kind or "string_value")
    return out


def facts(status: str, capture: bool) -> tuple[Any, ...]:
    llm = {"model": "m-1", "prompt_tokens": 11, "completion_tokens": 3, "duration_ms": 5}
    return (
        "turn1", "dm:ent_1", "turn", status, "engine_error" if status != "completed" else None,
        "it broke" if status == "failed" else None, "openai", "m-1", 1_000, 1_040, 11, 3,
        "the reply" if capture else "", [("item1", "hello" if capture else None)],
        [("llm", {**llm, "stop_reason": "end_turn"})],
        [("call1", "file_read", '{"path": "a"}' if capture else "", "text" if capture else "")],
    )  # fmt: skip


def test_a_turn_s_spans_carry_every_attribute_of_the_conventions() -> None:
    taken = Taken()
    tracing = Tracing(taken, Resource.create({"service.name": "b"}), capture=True)
    tracing.ingest(999_000_000, 999_500_000, "dm:ent_1", "item1")
    tracing.engine_call("turn1", 1_000, 1_030)
    tracing.tool_call("turn1", "file_read", 1_031, 1_035, "denied")
    tracing.turn(as_facts(facts("failed", capture=True)), "thread")
    tracing.flush()
    spans = taken.spans()
    (ingest,), (ack,), (agent,) = spans["ingest"], spans["ack"], spans["invoke_agent"]
    (chat,), (tool,) = spans["chat m-1"], spans["execute_tool file_read"]
    assert (ingest.trace_id, ingest.span_id) == (
        trace_of("item", "item1"),
        span_of("ingest", "item1"),
    )
    assert ingest.kind == wire.SERVER and not ingest.parent_span_id
    assert attrs(ingest) == {"gen_ai.conversation.id": "dm:ent_1", "broker.item.id": "item1"}
    assert ack.parent_span_id == ingest.span_id and attrs(ack) == {"broker.item.id": "item1"}
    assert agent.trace_id == ingest.trace_id and agent.parent_span_id == ingest.span_id
    assert agent.span_id == span_of("turn", "turn1") and agent.flags == 0x300
    assert (agent.start_time_unix_nano, agent.end_time_unix_nano) == (1_000_000_000, 1_040_000_000)
    a = attrs(agent)
    assert json.loads(a.pop("gen_ai.input.messages")) == [
        {"role": "user", "parts": [{"type": "text", "content": "hello"}]}
    ]
    assert json.loads(a.pop("gen_ai.output.messages"))[0]["parts"][0]["content"] == "the reply"
    assert a == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": "dm:ent_1",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m-1",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "broker.turn.id": "turn1",
        "broker.turn.type": "turn",
        "broker.turn.status": "failed",
        "broker.turn.written": "thread",
        "error.type": "engine_error",
    }
    assert agent.status.code == Status.StatusCode.STATUS_CODE_ERROR
    assert agent.status.message == "it broke"
    assert [(link.span_id, attrs(link)["broker.link"]) for link in agent.links] == [
        (ingest.span_id, "ingest"),
        (ack.span_id, "ack"),
    ]
    assert chat.parent_span_id == agent.span_id and chat.kind == wire.CLIENT
    assert attrs(chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m-1",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ["end_turn"],
    }
    assert (chat.start_time_unix_nano, chat.end_time_unix_nano) == (1_000_000_000, 1_005_000_000)
    assert tool.parent_span_id == agent.span_id
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "file_read",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "call1",
        "gen_ai.tool.call.arguments": '{"path": "a"}',
        "gen_ai.tool.call.result": "text",
        "error.type": "denied",
    }
    assert tool.status.code == Status.StatusCode.STATUS_CODE_ERROR


def test_without_capture_no_text_leaves_and_a_completed_turn_has_no_error() -> None:
    taken = Taken()
    tracing = Tracing(taken, Resource.create({"service.name": "b"}), capture=False)
    tracing.engine_call("turn1", 1_000, 1_030)
    tracing.tool_call("turn1", "file_read", 1_031, 1_035, "ok")
    tracing.turn(as_facts(facts("completed", capture=False)), "thread")
    tracing.flush()
    spans = taken.spans()
    agent, tool = spans["invoke_agent"][0], spans["execute_tool file_read"][0]
    assert not {"gen_ai.input.messages", "gen_ai.output.messages", "error.type"} & set(attrs(agent))
    assert not agent.status.code and not tool.status.code
    assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "error.type"} & set(
        attrs(tool)
    )


def test_a_kept_attribute_keeps_its_value_s_type() -> None:
    made = [wire.attribute("k", v) for v in (1, True, 1.0, "1")]
    span = ScopeSpans.FromString(
        wire.span(b"t" * 16, b"s" * 8, b"", 0x100, wire.name("n"), wire.INTERNAL, 0, 0, made)
    ).spans[0]
    assert [kv.value.WhichOneof("value") for kv in span.attributes] == [
        "int_value",
        "bool_value",
        "double_value",
        "string_value",
    ]


def test_a_note_that_makes_no_spans_costs_only_its_own() -> None:
    taken = Taken()
    tracing = Tracing(taken, Resource.create({"service.name": "b"}), capture=False)
    good = ("ingest", 1_000, 2_000, "dm:ent_1", "item1")
    bad = [("turn", ("too", "short"), "thread"), ("nonsense",), ("ingest", "x")]
    shipments = frame([*bad, good]) + frame([good])
    serve(io.BytesIO(shipments), tracing)
    assert [len(r.resource_spans[0].scope_spans[0].spans) for r in taken.requests] == [2, 2]


def test_a_shipment_arrives_whole_marshalled_or_else_pickled() -> None:
    """Plain notes travel marshalled; a turn whose model call's event holds an object
    marshal does not know (a Decimal) travels pickled, and makes the same spans."""
    plain = facts("completed", capture=False)
    odd = (*plain[:14], [("llm", {**plain[14][0][1], "cost": Decimal("0.01")})], plain[15])
    made: list[dict[str, list[Span]]] = []
    for values in (plain, odd):
        taken = Taken()
        tracing = Tracing(taken, Resource.create({"service.name": "b"}), capture=False)
        notes = [
            ("ingest", 999_000_000, 999_500_000, "dm:ent_1", "item1"),
            ("engine_call", "turn1", 1_000, 1_030),
            ("turn", values, "thread"),
        ]
        serve(io.BytesIO(frame(notes)), tracing)
        made.append(taken.spans())
    assert frame([("turn", plain, "thread")])[8] == 0  # marshal
    assert frame([("turn", odd, "thread")])[8] == 1  # pickle
    assert sorted(made[0]) == sorted(made[1]) == ["ack", "chat m-1", "ingest", "invoke_agent"]
    assert attrs(made[0]["chat m-1"][0]) == attrs(made[1]["chat m-1"][0])


def test_the_ids_kept_for_turns_to_come_are_the_newest_items() -> None:
    tracing = Tracing(Taken(), Resource.create({"service.name": "b"}), capture=False)
    for n in range(OPEN_ITEMS + 100):
        tracing.ingest(1_000, 2_000, "dm:ent_1", f"item{n}")
        tracing.spans.clear()
    kept = list(tracing._items)
    assert kept == [f"item{n}" for n in range(100, OPEN_ITEMS + 100)]
