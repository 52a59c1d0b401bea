"""`[tracing] otlp_endpoint`: a turn's spans reach a real OTLP/HTTP receiver.

The receiver (tests/integration/observe_servers.py) decodes each export with
opentelemetry-proto. A turn of the scripted engine that reports two model calls
and calls a broker tool is an `invoke_agent` span with two `chat` children and
an `execute_tool` child, in the GenAI conventions, in the trace of its
message's ingest (its parent) and linked to that ingest and its ack, received
within 5 s of the turn's end; message text is in them only with
`capture_content`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonFactory
from tests.integration.observe_servers import OtlpReceiver, eventually, otlp_receiver
from tests.integration.scripted import Scripted, call

pytestmark = pytest.mark.anyio
EXPORT_WITHIN_S = 5.0


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in value.array_value.values]
        else:
            out[kv.key] = getattr(value, kind)
    return out


def llm(model: str, prompt: int, completion: int) -> str:
    data = {"model": model, "prompt_tokens": prompt, "completion_tokens": completion}
    return f"event llm {json.dumps({**data, 'duration_ms': 5, 'stop_reason': 'end_turn'})}"


def spans_named(receiver: OtlpReceiver, prefix: str) -> list[Any]:
    return [span for _, span in receiver.spans() if span.name.startswith(prefix)]


async def run_turn(
    make_daemon: DaemonFactory, tmp: Path, backend: str, receiver: OtlpReceiver, capture: bool
) -> tuple[dict[str, Any], float]:
    tracing = {"otlp_endpoint": receiver.url, "capture_content": capture}
    s = Scripted(make_daemon, tmp, backend, {"tracing": tracing})
    script = "\n".join(
        [llm("model-a", 11, 3), call("scratchpad_get"), llm("model-a", 17, 4), "secret words"]
    )
    reply = await s.say(script, "m1")
    return reply, time.monotonic()


async def test_a_turn_is_a_trace_of_its_calls(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    with otlp_receiver() as receiver:
        reply, ended = await run_turn(make_daemon, tmp_path, anyio_backend, receiver, False)
        agent = (await eventually(lambda: spans_named(receiver, "invoke_agent")))[0]
        assert receiver.arrival_of("invoke_agent") - ended < EXPORT_WITHIN_S
        chats = await eventually(lambda: spans_named(receiver, "chat"))
        tools = spans_named(receiver, "execute_tool")
        ingest = spans_named(receiver, "ingest")
        acks = spans_named(receiver, "ack")
    a = attrs(agent)
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.conversation.id"] == reply["session"]
    assert a["broker.turn.status"] == "completed"
    assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a
    assert sorted(
        (
            attrs(c)["gen_ai.request.model"],
            attrs(c)["gen_ai.usage.input_tokens"],
            attrs(c)["gen_ai.usage.output_tokens"],
        )
        for c in chats
    ) == [("model-a", 11, 3), ("model-a", 17, 4)]
    assert all(attrs(c)["gen_ai.operation.name"] == "chat" for c in chats)
    assert [attrs(t)["gen_ai.tool.name"] for t in tools] == ["scratchpad_get"]
    assert "gen_ai.tool.call.result" not in attrs(tools[0])
    for child in [*chats, *tools]:
        assert child.trace_id == agent.trace_id and child.parent_span_id == agent.span_id
        assert agent.start_time_unix_nano <= child.start_time_unix_nano
        assert child.end_time_unix_nano <= agent.end_time_unix_nano
    # The message's ingest and its ack begin the trace; the turn is a child of the ingest
    # and links to both.
    assert len(ingest) == 1 and len(acks) == 1
    assert acks[0].parent_span_id == ingest[0].span_id
    assert agent.trace_id == ingest[0].trace_id == acks[0].trace_id
    assert agent.parent_span_id == ingest[0].span_id and not ingest[0].parent_span_id
    assert attrs(ingest[0])["gen_ai.conversation.id"] == reply["session"]
    linked = {(link.trace_id, link.span_id) for link in agent.links}
    assert (ingest[0].trace_id, ingest[0].span_id) in linked
    assert (acks[0].trace_id, acks[0].span_id) in linked


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_content_only_when_captured(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    with otlp_receiver() as receiver:
        await run_turn(make_daemon, tmp_path, anyio_backend, receiver, True)
        agent = (await eventually(lambda: spans_named(receiver, "invoke_agent")))[0]
        tool = (await eventually(lambda: spans_named(receiver, "execute_tool")))[0]
    a = attrs(agent)
    assert "secret words" in json.loads(a["gen_ai.input.messages"])[0]["parts"][0]["content"]
    assert json.loads(a["gen_ai.output.messages"])[0]["role"] == "assistant"
    assert attrs(tool)["gen_ai.tool.call.result"] is not None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_exporter_sends_as_the_environment_says(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A collector that wants a key and compressed bodies: the OpenTelemetry exporter's own
    # variables, which the daemon's trace exporter process inherits (each variable's
    # handling: test_otlp_http.py).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20k3y")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    with otlp_receiver() as receiver:
        await run_turn(make_daemon, tmp_path, anyio_backend, receiver, False)
        await eventually(lambda: spans_named(receiver, "invoke_agent"))
        sent = list(receiver.headers)
    assert sent and all(h.get("authorization") == "Bearer k3y" for h in sent)
    assert all(h.get("content-encoding") == "gzip" for h in sent)
