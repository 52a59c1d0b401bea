"""Workers through the port: links, `workers.list`, the handoff, a worker that waits
and reports with `worker_done` (ledger/dispatch.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.engine_types import ToolCall
from ledger.port.errors import Conflict, NotFound
from ledger.port.protocols import LedgerPort
from ledger.port.records import Dispatched, Handoff, Limits
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio
LIMITS = Limits(max_depth=2, max_children=8, timeout_ms=60_000)


async def _parent_turn(port: LedgerPort) -> tuple[str, str]:
    acc = await ingest(port, inbound("m1"))
    rec = turn(acc.session, None, await port.open_items(acc.session), "hello")
    await port.submit_turn(rec).result()
    return acc.session, rec.turn_id


async def test_a_dispatch_lists_with_its_turn_and_tool_call(port: LedgerPort) -> None:
    parent, parent_turn = await _parent_turn(port)
    done = await port.dispatch(
        parent=parent, parent_turn=parent_turn, tool_call="call-ours", target={"kind":
        "new_session", "label_hint": "w"}, task="count", persona=None, limits=LIMITS, now=tick(),
    )  # fmt: skip
    listed = await port.workers_list(parent, None)
    keys = ("session", "parent_turn", "spawn_tool_call_id", "status", "task")
    assert [tuple(w[k] for k in keys) for w in listed] == [
        ("worker:w", parent_turn, "call-ours", "running", "count")
    ]
    assert await port.workers_list(parent, parent_turn) == listed
    with pytest.raises(NotFound):
        await port.workers_list("dm:nobody", None)
    with pytest.raises(NotFound):
        await port.workers_list(parent, "no-such-turn")
    assert done.session == "worker:w"


async def test_the_handoff_carries_the_named_entries_or_refuses_whole(port: LedgerPort) -> None:
    parent, _ = await _parent_turn(port)
    await port.scratchpad_merge(parent, {"city": "Oslo", "secret": 1}, tick())

    async def dispatch(task: str, handoff: Handoff) -> Dispatched:
        return await port.dispatch(
            parent=parent, parent_turn=None, tool_call=None, target={"kind": "new_session"},
            task=task, persona=None, limits=LIMITS, now=tick(), handoff=handoff,
        )  # fmt: skip

    with pytest.raises(Conflict) as missing:
        await dispatch("x", Handoff(None, ("nope",)))
    assert missing.value.field == "scratchpad_keys"
    assert await port.workers_list(parent, None) == []
    done = await dispatch("go", Handoff("Decisions: fly", ("city",)))
    [item] = await port.open_items(done.session)
    assert item.content.startswith("go\n\n--- Handoff from ")
    assert "Decisions: fly" in item.content and '{"city":"Oslo"}' in item.content
    assert "secret" not in item.content
    assert (await port.workers_list(parent, None))[0]["task"] == "go"


async def test_a_waiting_worker_reports_once_with_worker_done(port: LedgerPort) -> None:
    parent, _ = await _parent_turn(port)
    done = await port.dispatch(
        parent=parent, parent_turn=None, tool_call=None, target={"kind": "new_session"},
        task="research", persona=None, limits=LIMITS, now=tick(),
    )  # fmt: skip
    with pytest.raises(Conflict, match="not taken its task yet"):
        await port.report_worker_done(done.session, "too early", tick())
    [task] = await port.open_items(done.session)
    first = turn(done.session, None, [task], "scheduled a check")
    first.tool_calls = [ToolCall("c1", "schedule", "{}", "{}", "ok")]
    assert await port.submit_turn(first).result() == []  # it waits: the task goes on
    later = replace(turn(done.session, first.turn_id, [], "still going"), tool_calls=[
        ToolCall("c2", "agent_send", "{}", "{}", "ok")])  # fmt: skip
    assert await port.submit_turn(later).result() == []
    reported = await port.report_worker_done(done.session, "found it", tick())
    assert reported.dispatches == (done.dispatch,)
    [result] = reported.items
    assert result.session == parent and "found it" in result.content
    with pytest.raises(Conflict) as again:  # one result per dispatch
        await port.report_worker_done(done.session, "found it", tick())
    assert "already ended (completed)" in str(again.value)
    last = turn(done.session, later.turn_id, [], "bye")  # waits for nothing: settles none
    assert await port.submit_turn(last).result() == []
    assert await port.sweep_worker_timeouts(tick() + 10**9) == []
    assert [w["status"] for w in await port.workers_list(parent, None)] == ["completed"]


async def test_a_worker_that_waits_for_nothing_reports_its_reply(port: LedgerPort) -> None:
    parent, _ = await _parent_turn(port)
    done = await port.dispatch(
        parent=parent, parent_turn=None, tool_call=None, target={"kind": "new_session"},
        task="one turn", persona=None, limits=LIMITS, now=tick(),
    )  # fmt: skip
    [task] = await port.open_items(done.session)
    failing = replace(turn(done.session, None, [task], ""), status="failed", error="broke")
    failing.tool_calls = [ToolCall("c1", "schedule", "{}", "{}", "ok")]
    [result] = await port.submit_turn(failing).result()  # a failed turn waits for nothing
    assert "failed" in result.content and "broke" in result.content
