"""The daemon's windows: the metrics endpoint, the trace exporter and the web console.

Everything here is opened before the daemon says it is ready: an address in
use or an unsafe token file stops the start with exit 78 naming the key, and
nothing listens half-configured. While they run, the hooks report to the
observers installed here; when the daemon stops, the silent observer comes
back, and the trace exporter sends what it holds within a bounded wait.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc

from broker.observe import http, hub
from broker.ops.table import stuck_items
from plumbing import logs

if TYPE_CHECKING:
    from broker.config import Settings
    from broker.mailbox.registry import Mailboxes
    from broker.ops.table import Ops
    from ledger.port.protocols import LedgerPort

log = logs.get("broker.observe")


class DaemonView(Protocol):
    """What the endpoints read of the daemon: its settings (they change on a reload)."""

    settings: Settings

    def state_of(self, label: str) -> str: ...


class Writer(Protocol):
    on_batch: Any


class Endpoints:
    """The configured endpoints of one daemon run (an async context manager)."""

    def __init__(self) -> None:
        self.observers: list[hub.Observer] = []
        self.servers: list[tuple[str, anyio.abc.Listener[anyio.abc.ByteStream], http.Handler]] = []
        self.console: Any = None  # broker.console.app.Console, when served
        self.tracer: Any = None  # broker.observe.trace_export.TraceShipper, when on
        self.writer: Writer | None = None

    @classmethod
    async def open(
        cls, daemon: DaemonView, ledger: LedgerPort, mailboxes: Mailboxes, ops: Ops
    ) -> Endpoints:
        """Bind what the settings ask for; EndpointError (exit 78) if one cannot be."""
        s = daemon.settings
        self = cls()
        try:
            if s.metrics.address:
                from broker.observe.metrics import Metrics, configured_models, endpoint

                metrics = Metrics(configured_models(s))
                listener = await http.listen("metrics.address", s.metrics.address)

                async def refresh() -> None:
                    await metrics.refresh(
                        ledger,
                        ledger.writer_stats(),
                        len(mailboxes.actors),
                        lambda rows, now: len(stuck_items(mailboxes, rows, now)),
                        daemon.settings.queue.stuck_after_s,
                    )

                handler = endpoint(metrics, refresh)
                self.servers.append(("metrics", listener, handler))
                self.observers.append(metrics)
            if s.tracing.otlp_endpoint:
                from broker.observe.trace_export import TraceShipper

                self.tracer = TraceShipper(s)
                self.observers.append(self.tracer)
            if s.console.address:
                from broker.console.app import Console  # the `console` extra

                self.console = await Console.open(daemon, ledger, mailboxes, ops)
                self.observers.append(self.console.live)
        except BaseException:
            await self.aclose()
            raise
        writer = getattr(ledger, "writer", None)
        if self.observers and writer is not None and hasattr(writer, "on_batch"):
            self.writer = writer
            observer = hub.Fanout(self.observers)
            writer.on_batch = observer.batch
        hub.install(self.observers)
        return self

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        for name, listener, handler in self.servers:
            await tg.start(http.serve, listener, handler)
            log.info("serving", endpoint=name)
        if self.tracer is not None:
            await tg.start(self.tracer.run)
        if self.console is not None:
            await tg.start(self.console.serve)

    async def __aenter__(self) -> Endpoints:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        hub.install([])
        if self.writer is not None:
            self.writer.on_batch = None
        with anyio.CancelScope(shield=True):
            for _, listener, _ in self.servers:
                await listener.aclose()
            if self.console is not None:
                self.console.close()
