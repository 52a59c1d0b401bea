"""A Temporal-run turn's spans join its message's trace when the turn runs on another
node than the one that took the message (broker/observe/tracing.py).

Two nodes, each with a task queue of its own, send their spans to one real OTLP/HTTP
receiver. A person's first message comes in by node 1, so the session's workflow
lives on node 1's queue; their second comes in by node 0, which acks it and signals
that workflow, and node 1 runs the turn. The second turn's `invoke_agent`, made by
node 1, is in the trace of the ingest node 0 made, a child of that ingest, and its
`chat` is its own child.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.observe_servers import eventually, otlp_receiver
from tests.integration.test_tracing import attrs
from tests.integration.wire import Adapter, uniq

pytestmark = pytest.mark.anyio
ECHO = {"engine": {"chunks": 2, "delay_ms": 20}, "queue": {"debounce_ms": 0, "idle_stop_s": 120}}


def node_of(resource: Any) -> str:
    return str(attrs(resource)["service.instance.id"])


async def test_a_turn_run_on_another_node_joins_its_message_trace(
    make_cluster: ClusterFactory,
) -> None:
    with otlp_receiver() as receiver:
        cluster = make_cluster(
            2,
            {**ECHO, "tracing": {"otlp_endpoint": receiver.url}},
            per_node=[
                {"runtime": {"task_queue": uniq("qa")}},
                {"runtime": {"task_queue": uniq("qb")}},
            ],
        )
        a, b = cluster.nodes
        channel, person = uniq("chat"), uniq("u")
        async with (
            await Adapter.connect(a, channel) as on_a,
            await Adapter.connect(b, channel) as on_b,
        ):
            first = await on_b.send_inbound(uniq("m"), "hello", person)
            await on_b.deliver(session=first["session"], within=30)
            second = await on_a.send_inbound(uniq("m"), "again", person)
            assert second["session"] == first["session"]

            def all_came() -> bool:
                names = [s.name for _, s in receiver.spans()]
                return names.count("invoke_agent") >= 2 and names.count("ingest") >= 2

            await eventually(all_came)
            spans = receiver.spans()

    ingests = [(r, s) for r, s in spans if s.name == "ingest"]
    assert sorted(node_of(r) for r, _ in ingests) == ["n0", "n1"]
    (_, ingest_a) = next((r, s) for r, s in ingests if node_of(r) == "n0")
    ack_a = next(s for _, s in spans if s.name == "ack" and s.trace_id == ingest_a.trace_id)
    assert ack_a.parent_span_id == ingest_a.span_id
    # The turn of node 0's message: made by node 1, in node 0's ingest's trace, its child.
    (node, agent) = next(
        (r, s)
        for r, s in spans
        if s.name == "invoke_agent" and s.parent_span_id == ingest_a.span_id
    )
    assert node_of(node) == "n1"
    assert agent.trace_id == ingest_a.trace_id
    assert (ingest_a.trace_id, ingest_a.span_id) in {(k.trace_id, k.span_id) for k in agent.links}
    assert attrs(agent)["gen_ai.conversation.id"] == first["session"]
    chats = [s for _, s in spans if s.name.startswith("chat") and s.parent_span_id == agent.span_id]
    assert len(chats) == 1 and chats[0].trace_id == ingest_a.trace_id
    # Each node's spans are one trace per message: the first turn joined node 1's ingest.
    (_, ingest_b) = next((r, s) for r, s in ingests if node_of(r) == "n1")
    assert any(s.name == "invoke_agent" and s.trace_id == ingest_b.trace_id for _, s in spans)
