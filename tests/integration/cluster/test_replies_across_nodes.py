"""Replies across nodes (broker/cluster_push.py): a reply reaches the adapter of its
channel on whichever node that adapter is connected to, once."""

from __future__ import annotations

from collections import Counter

import anyio
import orjson
import pytest

from tests.harness import DaemonProcess
from tests.integration.cluster.conftest import ClusterFactory
from tests.integration.wire import Adapter, Frame, completed_inputs, uniq

pytestmark = pytest.mark.anyio
SLOW_ECHO = {"engine": {"chunks": 2, "delay_ms": 100}, "queue": {"debounce_ms": 0}}


async def collect_delivers(adapter: Adapter, count: int, within: float) -> list[Frame]:
    """`count` deliver frames, each confirmed; then a quiet while for any duplicate."""
    got: list[Frame] = []
    with anyio.fail_after(within):
        while len(got) < count:
            frame = await adapter.deliver()
            await adapter.confirm(frame["out_id"])
            got.append(frame)
    for frame in await adapter.read_for(0.4):
        if frame.get("type") == "deliver":
            got.append(frame)
    return got


async def test_a_turn_run_on_node_b_reaches_the_adapter_on_node_a_once(
    make_cluster: ClusterFactory,
) -> None:
    # Each node its own task queue: a session whose messages come in by node 1 has its
    # turns run there; its channel's only adapter left is on node 0.
    cluster = make_cluster(
        2,
        SLOW_ECHO,
        per_node=[{"runtime": {"task_queue": uniq("qa")}}, {"runtime": {"task_queue": uniq("qb")}}],
    )
    a, b = cluster.nodes
    channel = uniq("chat")
    async with await Adapter.connect(a, channel) as on_a:
        sent: dict[str, str] = {}
        async with await Adapter.connect(b, channel) as sender:
            for n in range(5):
                msg = uniq("m")
                ack = await sender.send_inbound(msg, f"hello {n}", uniq("u"))
                sent[msg] = ack["session"]
        # The sender on node 1 is gone before any turn (100 ms a chunk) commits.
        got = await collect_delivers(on_a, len(sent), within=20)
    assert Counter(f["out_id"] for f in got).most_common(1)[0][1] == 1
    assert sorted(m for f in got for m in f["in_reply_to"]) == sorted(sent)
    for msg, session in sent.items():
        assert completed_inputs(a, session) == [[msg]]
    # The turns ran on node 1 (its queue's only worker), none on node 0.
    assert turns_run_by(b) >= set(sent.values())
    assert not turns_run_by(a) & set(sent.values())


def turns_run_by(node: DaemonProcess) -> set[str]:
    """The sessions whose turns `node` completed, from its log."""
    lines = (orjson.loads(line) for line in node.log_lines() if line.startswith("{"))
    return {e["session"] for e in lines if e.get("event") == "turn completed"}


async def test_two_nodes_with_adapters_of_one_channel_send_each_reply_once(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(2, SLOW_ECHO)
    a, b = cluster.nodes
    channel = uniq("chat")
    async with await Adapter.connect(a, channel) as on_a, await Adapter.connect(b, channel) as on_b:
        msgs = []
        for n in range(12):
            msg = uniq("m")
            await (on_a if n % 2 else on_b).send_inbound(msg, f"hi {n}", uniq("u"))
            msgs.append(msg)

        got: list[Frame] = []
        all_in = anyio.Event()

        async def drain(adapter: Adapter) -> None:
            while True:
                frame = await adapter.deliver(within=20)
                await adapter.confirm(frame["out_id"])
                got.append(frame)
                if len(got) >= len(msgs):
                    all_in.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, on_a)
            tg.start_soon(drain, on_b)
            with anyio.fail_after(20):
                await all_in.wait()
            tg.cancel_scope.cancel()
        for adapter in (on_a, on_b):
            got.extend(f for f in await adapter.read_for(0.3) if f.get("type") == "deliver")
    assert sorted(m for f in got for m in f["in_reply_to"]) == sorted(msgs)
    assert len({f["out_id"] for f in got}) == len(got) == len(msgs)
