"""core/turn_events.py: when a running turn's events are written, and what counts."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from core import turn_events as te


def test_an_event_with_nothing_on_its_way_is_sent_at_once() -> None:
    log = te.EventLog([("intent", {})])
    assert te.flush_due(log)


def test_events_wait_while_a_write_is_on_its_way() -> None:
    log = te.EventLog([("intent", {}), ("action", {})], sent=1, in_flight=True)
    assert not te.flush_due(log)
    log.in_flight = False  # it committed: the waiting one leaves now
    assert te.flush_due(log)


def test_too_many_waiting_leave_without_waiting_longer() -> None:
    log = te.EventLog([("action", {})] * (te.MAX_WAITING + 1), sent=1, in_flight=True)
    assert te.flush_due(log)
    log.sent = 2
    assert not te.flush_due(log)


def test_nothing_is_sent_once_the_record_is_built_or_when_none_wait() -> None:
    assert not te.flush_due(te.EventLog([]))
    assert not te.flush_due(te.EventLog([("llm", {})], sent=1))
    assert not te.flush_due(te.EventLog([("llm", {})], closed=True))


@given(st.lists(st.sampled_from(["event", "commit"]), max_size=60))
def test_group_commit_sends_every_event_once_in_order(steps: list[str]) -> None:
    """Driving the decision as a turn would: each event sent exactly once, in seq order,
    with at most one write under way, and never more writes than events."""
    log = te.EventLog([])
    writes: list[list[int]] = []
    for n, step in enumerate(steps):
        if step == "event":
            log.events.append(("action", {"n": n}))
        elif log.in_flight:
            log.in_flight = False
        else:
            continue
        if te.flush_due(log):
            writes.append([e[1]["n"] for e in log.events[log.sent :]])
            log.sent, log.in_flight = len(log.events), True
    sent = [n for write in writes for n in write]
    assert sent == [e[1]["n"] for e in log.events[: log.sent]]
    assert len(writes) <= len(log.events)
    assert log.waiting == 0 or log.in_flight


def test_model_calls_are_llm_events() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("intent", {}),
        ("llm", {"by": "broker"}),
        ("llm", {"round": 2}),
        ("error", {}),
    ]
    assert te.model_calls(events) == 2
    assert te.model_calls([]) == 0


def test_files_modified_are_distinct_normal_paths() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("file", {"path": "src/a.py", "op": "edit"}),
        ("file", {"path": "./src//a.py", "op": "write"}),
        ("file", {"path": "b.py", "op": "read"}),
        ("file", {"path": "/etc/passwd", "op": "write"}),
        ("file", {"path": None, "op": "write"}),
        ("file", {"path": "c.py", "op": "delete"}),
        ("action", {"path": "d.py", "op": "write"}),
    ]
    assert te.modified_paths(events) == {"src/a.py", "c.py"}


def test_the_payloads() -> None:
    intent = te.intent_payload([("m1", "Ann", "x" * 600), (None, None, "hi")])
    assert intent["inputs"][0] == {"msg_id": "m1", "sender": "Ann", "text": "x" * 500}
    assert intent["by"] == "broker" and "text" not in intent  # not the focus: no `text`
    call = te.llm_payload("m", 3, 4, 12, te.stop_reason("aborted", "interrupt"))
    assert call["stop_reason"] == "interrupt" and call["duration_ms"] == 12
    assert te.stop_reason("completed", None) == "end_turn"
    assert te.stop_reason("failed", None) == "failed"
    action = te.action_payload("recall", "error", 5, "boom")
    assert action == {
        "by": "broker",
        "tool": "recall",
        "status": "error",
        "duration_ms": 5,
        "error": "boom",
    }


def test_the_log_counts_the_model_calls_the_engine_reported() -> None:
    log = te.EventLog([])
    log.add("llm", {"model": "m", "round": 1})
    log.add("llm", {"by": "broker"})
    log.add("action", {"tool": "x"})
    assert (log.engine_calls, log.waiting) == (1, 3)
