"""The daemon's Prometheus metrics, served at GET /metrics on `[metrics] address`.

Every label set is bounded: outcomes, queue states and token kinds are fixed
words, and a model label takes only the models the configuration names; no
session, person or channel ever becomes a label. Counters and histograms are
fed by the hooks (broker/observe/hub.py) as things happen; the gauges that
describe the ledger (queue items, stuck sessions, unconfirmed deliveries) are
read when Prometheus scrapes, with a bounded wait on a reader connection, so a
scrape never holds the writer and a slow ledger answers the last figures read.
The writer's figures (batch size, commit latency) are measured where its
batches come back to the daemon, so with the writer in its own process they
still reach this one endpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from broker.observe.http import Handler, Response
from broker.observe.hub import ErasureState, InboundOutcome, Observer
from ledger.port.protocols import ReadPort, WriterStats
from ledger.port.records import TurnRecord
from plumbing import logs
from plumbing.ids import now_ms

if TYPE_CHECKING:
    from broker.config import Settings

log = logs.get("broker.observe")
READ_BOUND_S = 2.0  # a scrape's reads of the ledger; past it, the last figures
OTHER_MODEL = "other"  # the label of a model the configuration does not name
# A turn's status, or where its record went when not on its thread.
TURN_OUTCOMES = ("completed", "aborted", "failed", "orphan", "lost")
ERASED_KINDS = ("sessions", "messages", "files")  # an erasure's counts (entity.erase)

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_TURN = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def configured_models(settings: Settings) -> frozenset[str]:
    """The models a turn may name: the engines' and the personas' (the label's bound)."""
    names = {settings.engine.model, settings.engine.compaction_model}
    names |= {e.model for e in settings.engines.values()}
    names |= {e.compaction_model for e in settings.engines.values()}
    names |= {p.model for p in settings.personas.values()}
    names |= {p.compaction_model for p in settings.personas.values()}
    return frozenset(n for n in names if n)


class Metrics(Observer):
    """The metric families, in a registry of their own, fed by the hooks."""

    def __init__(self, models: frozenset[str] = frozenset()) -> None:
        self.models = models
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.inbound_total = Counter(
            "broker_inbound", "Inbound messages answered, by outcome.", ["outcome"], registry=r
        )
        self.ack_seconds = Histogram(
            "broker_ack_seconds",
            "From an inbound message handed to the ledger writer to its ack.",
            buckets=_FAST,
            registry=r,
        )
        self.turns_total = Counter(
            "broker_turns", "Turns ended, by outcome.", ["outcome"], registry=r
        )
        self.turn_seconds = Histogram(
            "broker_turn_duration_seconds",
            "A turn's time from its start to its end.",
            buckets=_TURN,
            registry=r,
        )
        self.tokens_total = Counter(
            "broker_engine_tokens",
            "Tokens the engines reported, by model and kind (input, output).",
            ["model", "kind"],
            registry=r,
        )
        self.first_chunk_seconds = Histogram(
            "broker_engine_first_chunk_seconds",
            "From an engine call's start to its first streamed chunk.",
            buckets=_TURN,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "broker_ledger_commit_seconds",
            "From a batch handed to the ledger writer to its outcomes back (its transaction).",
            buckets=_FAST,
            registry=r,
        )
        self.batch_jobs = Histogram(
            "broker_ledger_batch_jobs",
            "Jobs in each transaction of the ledger writer (group commit).",
            buckets=_BATCH,
            registry=r,
        )
        self.queue_items = Gauge(
            "broker_queue_items", "Open queue items, by state.", ["state"], registry=r
        )
        self.stuck_sessions = Gauge(
            "broker_stuck_sessions",
            "Sessions whose open items no live actor holds past queue.stuck_after_s.",
            registry=r,
        )
        self.unconfirmed = Gauge(
            "broker_deliveries_unconfirmed",
            "Replies sent or due whose adapter has not confirmed them.",
            registry=r,
        )
        self.sessions = Gauge("broker_sessions", "Sessions in the ledger.", registry=r)
        self.actors = Gauge("broker_actors", "Session actors alive in this daemon.", registry=r)
        self.writer_queue = Gauge(
            "broker_ledger_writer_queue", "Jobs waiting for the ledger writer.", registry=r
        )
        self.wal_bytes = Gauge("broker_ledger_wal_bytes", "Size of the ledger's WAL.", registry=r)
        self.up_since = Gauge(
            "broker_start_time_seconds", "When this daemon started (Unix time).", registry=r
        )
        self.expired_turns = Counter(
            "broker_expired_turns", "Turns made stubs by expiry ([retention]).", registry=r
        )
        self.expiry_runs = Counter("broker_expiry_runs", "Expiry runs ended.", registry=r)
        self.expiry_last_run = Gauge(
            "broker_expiry_last_run_seconds",
            "When the last expiry run ended (Unix time; 0: none yet).",
            registry=r,
        )
        self.erasures = Counter(
            "broker_erasures", "Erasures (entity.erase), by state.", ["state"], registry=r
        )
        self.erased_rows = Counter(
            "broker_erasure_removed",
            "What finished erasures removed, by kind.",
            ["kind"],
            registry=r,
        )
        for state in ("started", "finished"):
            self.erasures.labels(state)
        for kind in ERASED_KINDS:
            self.erased_rows.labels(kind)
        # The label children the hooks count into, bound once (a `labels` call per hook
        # would cost a lock and a lookup each time).
        self._inbound = {o: self.inbound_total.labels(o) for o in ("acked", "duplicate", "refused")}
        self._turns = {o: self.turns_total.labels(o) for o in TURN_OUTCOMES}
        self._tokens: dict[tuple[str, str], Any] = {}
        for state in ("queued", "running"):
            self.queue_items.labels(state)
        self.up_since.set_to_current_time()

    # -- the hooks --------------------------------------------------------------

    def inbound(self, outcome: InboundOutcome) -> None:
        self._inbound[outcome].inc()

    def acked(self, filed_at: float, acked_at: float, session: str, item: str) -> None:
        self.ack_seconds.observe(acked_at - filed_at)

    def batch(self, jobs: int, seconds: float) -> None:
        self.batch_jobs.observe(jobs)
        self.commit_seconds.observe(seconds)

    def first_chunk(self, seconds: float) -> None:
        self.first_chunk_seconds.observe(seconds)

    def turn(self, rec: TurnRecord, written: str) -> None:
        outcome = rec.status if written == "thread" else written
        self._turns[outcome].inc()
        self.turn_seconds.observe(max(0, rec.completed_at - rec.started_at) / 1000)
        if rec.prompt_tokens or rec.completion_tokens:
            model = rec.model if rec.model in self.models else OTHER_MODEL
            if rec.prompt_tokens:
                self._tokens_of(model, "input").inc(rec.prompt_tokens)
            if rec.completion_tokens:
                self._tokens_of(model, "output").inc(rec.completion_tokens)

    def _tokens_of(self, model: str, kind: str) -> Any:
        found = self._tokens.get((model, kind))
        if found is None:  # bounded: the configured models and `other`
            found = self._tokens[model, kind] = self.tokens_total.labels(model, kind)
        return found

    def expiry(self, expired_turns: int) -> None:
        self.expiry_runs.inc()
        self.expired_turns.inc(expired_turns)
        self.expiry_last_run.set_to_current_time()

    def erasure(self, state: ErasureState, counts: Mapping[str, int]) -> None:
        self.erasures.labels(state).inc()
        for kind in ERASED_KINDS:
            if counts.get(kind):
                self.erased_rows.labels(kind).inc(counts[kind])

    # -- a scrape ---------------------------------------------------------------

    async def refresh(
        self,
        ledger: ReadPort,
        writer: WriterStats,
        actors: int,
        stuck: Callable[[list[tuple[str, int, int]], int], int],
        stuck_after_s: float,
    ) -> None:
        """The gauges read from the ledger and the daemon, within READ_BOUND_S;
        `stuck(untouched, now)` counts the stuck sessions among those untouched."""
        self.writer_queue.set(writer.queued)
        self.wal_bytes.set(writer.wal_bytes)
        self.actors.set(actors)
        now = now_ms()
        with anyio.move_on_after(READ_BOUND_S):
            counts, untouched, unreadable = await ledger.health_reads(
                now - int(stuck_after_s * 1000)
            )
            if unreadable is not None:
                log.warning("metrics: the ledger cannot be read", reason=unreadable)
                return
            self.sessions.set(counts.get("sessions", 0))
            self.queue_items.labels("queued").set(counts.get("items_queued", 0))
            self.queue_items.labels("running").set(counts.get("items_running", 0))
            self.unconfirmed.set(counts.get("unconfirmed", 0))
            self.stuck_sessions.set(stuck(untouched, now))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def endpoint(metrics: Metrics, refresh: Callable[[], Awaitable[None]]) -> Handler:
    """The handler of GET /metrics: `refresh` reads the gauges, then the figures go out."""

    async def handle(method: str, target: str) -> Response:
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return Response(405, b"only GET\n")
        if path == "/":
            return Response(200, b"brokerd: see /metrics\n")
        if path != "/metrics":
            return Response(404, b"not found: see /metrics\n")
        await refresh()
        return Response(200, metrics.exposition(), CONTENT_TYPE_LATEST)

    return handle


__all__ = ["Metrics", "configured_models", "endpoint"]
