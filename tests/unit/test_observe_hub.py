"""The hooks' hub: silent by default, and one failing observer costs only its own figure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.observe import hub
from broker.observe.tracing import span_of, trace_of


class Counting(hub.Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def inbound(self, outcome: hub.InboundOutcome) -> None:
        self.seen.append(outcome)


class Failing(hub.Observer):
    def inbound(self, outcome: hub.InboundOutcome) -> None:
        raise RuntimeError("broken observer")


@pytest.fixture(autouse=True)
def _silent_after() -> Iterator[None]:
    yield
    hub.install([])


def test_silent_until_installed_and_after() -> None:
    assert hub.observer is hub.SILENT
    counting = Counting()
    hub.install([counting])
    hub.observer.inbound("acked")
    hub.install([])
    hub.observer.inbound("acked")
    assert counting.seen == ["acked"] and hub.observer is hub.SILENT


def test_a_failing_observer_does_not_reach_the_hook_nor_the_others() -> None:
    counting = Counting()
    hub.install([Failing(), counting])
    hub.observer.inbound("refused")  # raises nothing
    assert counting.seen == ["refused"]


def test_trace_ids_are_the_same_in_every_process_and_differ_by_kind() -> None:
    assert trace_of("turn", "t1") == trace_of("turn", "t1") != trace_of("item", "t1")
    assert len(trace_of("turn", "t1")) == 16 and len(span_of("ack", "i")) == 8
    assert any(trace_of("turn", "t1")) and any(span_of("ack", "i"))  # all zero is invalid
    assert span_of("ingest", "i") != span_of("ack", "i")
