"""What metrics and tracing add to a turn, part by part, in one process: CPU per turn.

    .venv/bin/python -m bench.observe_hooks [--turns 20000] [--rounds 3]

bench.realistic measures the whole daemon with `--observe`, but on a busy
machine its pairs move by more than the few percent in question. This runs the
hooks of one echo turn (an inbound acked, a writer batch, a first chunk, eight
deltas, an engine call, the turn's record) `--turns` times against each
observer, and then the trace exporter's side: the shipped notes decoded and
made into OTLP spans, serialized as the request that would leave (the HTTP post
itself is not counted here; bench.realistic counts it). Figures are CPU
microseconds a turn, the best of `--rounds`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from broker.config import Settings
from broker.observe import hub
from broker.observe.metrics import Metrics
from broker.observe.trace_export import _HEADER, TraceShipper, frame, handlers, notes_of
from broker.observe.tracing import Tracing
from ledger.port.records import ItemInfo, TurnRecord

SHIPMENT = 500  # turns' notes in one shipment (about half a second of a busy daemon)


def record(n: int) -> TurnRecord:
    """An echo turn's record: one person's message in, a reply out, no model reported."""
    session = f"dm:ent_{n % 1000:06d}"
    item = ItemInfo(
        f"01HK1CP6X0GY35E6T1NB{n:06d}", n, session, "person", None, "running", None, None,
        "sms", f"m{n}", "+1555", "Person", "dm", None, None, "hello there",
    )  # fmt: skip
    return TurnRecord(
        turn_id=f"01HK1CP6X1GY35E6T1NB{n:06d}",
        session=session,
        parent_id=None,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output="hello there " * 4,
        engine="echo",
        model=None,
        started_at=1_700_000_000_000 + n,
        completed_at=1_700_000_000_033 + n,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[item],
        item_status="done",
        events=[("intent", {"text": "hello there"})],
    )


def hooks(records: list[TurnRecord], observers: list[hub.Observer]) -> float:
    """CPU seconds of every hook of every turn, reported to `observers`."""
    hub.install(observers)
    o = hub.observer
    began = time.process_time()
    for n, rec in enumerate(records):
        item = rec.inputs[0]
        o.inbound("acked")
        o.acked(1.0, 1.002, rec.session, item.id)
        o.batch(4, 0.002)
        o.first_chunk(0.004)
        for _ in range(8):
            o.delta(rec.session, rec.turn_id, "hello ")
        o.engine_call(rec.turn_id, rec.started_at, rec.completed_at)
        o.turn(rec, "thread")
        if n % SHIPMENT == SHIPMENT - 1:
            for observer in observers:
                if isinstance(observer, TraceShipper):
                    shipped = frame(observer.pending)
                    observer.pending = []
                    observer.shipped.append(shipped)  # type: ignore[attr-defined]
    spent = time.process_time() - began
    hub.install([])
    return spent


class _Sent:
    """The collector, taking every request at once: the post is not measured here."""

    def send(self, request: bytes) -> str | None:
        self.bytes = len(request)
        return None

    def close(self) -> None:
        pass


def exporter(shipments: list[bytes]) -> float:
    """CPU seconds of the exporter process's work on these shipments."""
    from opentelemetry.sdk.resources import Resource

    tracing = Tracing(_Sent(), Resource.create({"service.name": "bench"}), False)
    replay = handlers(tracing)
    began = time.process_time()
    for shipment in shipments:
        _, how = _HEADER.unpack_from(shipment)
        for kind, *args in notes_of(how, shipment[_HEADER.size :]):
            replay[kind](*args)
        tracing.flush()
    return time.process_time() - began


def best(rounds: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    records = [record(n) for n in range(args.turns)]
    settings = Settings.model_validate({"tracing": {"otlp_endpoint": "http://127.0.0.1:9"}})
    shipper: Any = None

    def tracing() -> float:
        nonlocal shipper
        shipper = TraceShipper(settings)
        shipper.shipped = []
        return hooks(records, [shipper])

    per_turn = 1e6 / args.turns

    def show(name: str, run: Callable[[], float]) -> None:
        print(f"    {name:<32}{best(args.rounds, run) * per_turn:8.1f} µs")

    print(f"{args.turns} echo turns, CPU per turn (best of {args.rounds}):")
    show("hooks, nothing on", lambda: hooks(records, []))
    show("hooks, metrics", lambda: hooks(records, [Metrics()]))
    show("hooks, tracing (daemon's side)", tracing)
    shipments = shipper.shipped
    show("trace exporter (no HTTP)", lambda: exporter(shipments))


if __name__ == "__main__":
    main()
