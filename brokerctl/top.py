"""`brokerctl top`: the broker's figures, live in the terminal.

Each refresh asks the daemon for `health` and the latest sessions over its
socket, and, when the daemon serves `[metrics]`, reads `/metrics` for the
rates: turns a second and the ack latency's 99th percentile over the last
interval (from the histogram's buckets, as Prometheus's `histogram_quantile`
does). The figures are computed by the plain functions below; the view only
draws them. Without metrics the rates show as "—" and say why.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import httpx
import typer
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from brokerctl.app import app, console, current_socket, opts
from wire.client import BrokerClient, BrokerError

SESSIONS_LOOKED_AT = 500  # the latest changed sessions counted by state


@dataclass
class Scrape:
    """The counters of one read of /metrics."""

    at: float
    turns: float = 0.0
    ack_buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count


@dataclass
class Figures:
    health: dict[str, Any]
    states: dict[str, int]
    turns_per_s: float | None = None
    ack_p99_s: float | None = None
    rates_note: str = ""


def parse_metrics(text: str, at: float) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "broker_turns_total":
                scrape.turns += sample.value
            elif sample.name == "broker_ack_seconds_bucket":
                scrape.ack_buckets[float(sample.labels["le"])] = sample.value
    return scrape


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The `q` quantile of a cumulative histogram (upper bound -> count), interpolated
    within its bucket as Prometheus does; None when it counted nothing."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    below_bound, below_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return below_bound  # past the last finite bound: its value
            if count == below_count:
                return bound
            return below_bound + (bound - below_bound) * (rank - below_count) / (
                count - below_count
            )
        below_bound, below_count = bound, count
    return bounds[-1]


def rates(before: Scrape | None, now: Scrape) -> tuple[float | None, float | None]:
    """Turns a second and the ack p99 between two scrapes (since start without `before`)."""
    if before is None:
        return None, quantile(0.99, now.ack_buckets)
    elapsed = now.at - before.at
    turns = (now.turns - before.turns) / elapsed if elapsed > 0 else None
    delta = {le: now.ack_buckets[le] - before.ack_buckets.get(le, 0.0) for le in now.ack_buckets}
    return turns, quantile(0.99, delta)


async def gather(metrics_url: str | None, before: Scrape | None) -> tuple[Figures, Scrape | None]:
    async with await BrokerClient.connect(current_socket()) as client:
        health = await client.op("health")
        sessions = await client.op("sessions.list", limit=SESSIONS_LOOKED_AT)
    figures = Figures(health, dict(Counter(str(s.get("state")) for s in sessions)))
    if metrics_url is None:
        figures.rates_note = "the daemon serves no [metrics]; give --metrics"
        return figures, None
    try:
        now = parse_metrics(await _scrape(metrics_url), time.monotonic())
    except httpx.HTTPError as exc:
        figures.rates_note = f"cannot read {metrics_url}: {exc}"
        return figures, None
    figures.turns_per_s, figures.ack_p99_s = rates(before, now)
    if before is None:
        figures.rates_note = "turns/s from the next refresh; ack p99 since start"
    return figures, now


async def _scrape(address: str) -> str:
    if "/" in address and not address.startswith("http"):
        transport = httpx.AsyncHTTPTransport(uds=address)
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            answer = await client.get("http://broker/metrics")
    else:
        url = address if address.startswith("http") else f"http://{address}/metrics"
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.get(url)
    answer.raise_for_status()
    return answer.text


def view(f: Figures) -> Group:
    h = f.health
    overview = Table(title="brokerd", show_header=False, expand=True)
    overview.add_column("figure")
    overview.add_column("value", justify="right")
    rows = [
        ("ok", "yes" if h.get("ok") else "NO"),
        ("sessions", h.get("sessions")),
        ("queued items", h.get("queued")),
        ("live actors", h.get("actors")),
        ("writer queue", h.get("writer_queue")),
        ("turns/s", "—" if f.turns_per_s is None else f"{f.turns_per_s:.2f}"),
        ("ack p99", "—" if f.ack_p99_s is None else f"{f.ack_p99_s * 1000:.1f} ms"),
        ("stuck sessions", len(h.get("stuck_items") or [])),
    ]
    for name, value in rows:
        overview.add_row(name, str(value))
    states = Table(title=f"states of the latest {SESSIONS_LOOKED_AT} sessions", expand=True)
    states.add_column("state")
    states.add_column("sessions", justify="right")
    for state, n in sorted(f.states.items(), key=lambda kv: -kv[1]):
        states.add_row(state, str(n))
    parts: list[Any] = [overview, states]
    stuck = h.get("stuck_items") or []
    if stuck:
        table = Table(title="stuck items", expand=True)
        for column in ("session", "items", "why"):
            table.add_column(column)
        for s in stuck[:10]:
            table.add_row(str(s.get("session")), str(s.get("items")), str(s.get("why")))
        parts.append(table)
    problems = h.get("problems") or []
    if problems:
        parts.append(Panel("\n".join(problems), title="problems", style="red"))
    if f.rates_note:
        parts.append(f"[dim]{f.rates_note}[/dim]")
    return Group(*parts)


def _metrics_address() -> str | None:
    if opts.get("config") is None:
        return None
    from broker.config import ConfigError, load_settings

    try:
        return load_settings(opts["config"]).metrics.address or None
    except ConfigError:
        return None


@app.command()
def top(
    metrics: Annotated[
        str | None,
        typer.Option(help="The daemon's [metrics] address (default: from --config)."),
    ] = None,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between refreshes.")] = 2.0,
    once: Annotated[bool, typer.Option(help="Print one view and exit.")] = False,
) -> None:
    """A live view: sessions by state, queue depth, turns/s, ack p99, stuck items."""
    address = metrics or _metrics_address()

    async def run() -> None:
        figures, before = await gather(address, None)
        if once:
            if before is not None:  # a second read for the rates
                since_start = figures.ack_p99_s
                await anyio.sleep(min(interval, 1.0))
                figures, _ = await gather(address, before)
                if figures.ack_p99_s is None:  # no ack meanwhile: the figure since start
                    figures.ack_p99_s = since_start
            console.print(view(figures))
            return
        with Live(view(figures), console=console, refresh_per_second=4) as live:
            while True:
                await anyio.sleep(interval)
                figures, now = await gather(address, before)
                before = now or before
                live.update(view(figures))

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        return
    except BrokerError as exc:
        console.print(f"brokerctl: {exc.code}: {exc.frame.get('message')}", style="red")
        raise typer.Exit(1) from exc
    except OSError as exc:
        console.print(
            f"brokerctl: cannot reach the broker at {current_socket()}: {exc.strerror or exc}",
            style="red",
        )
        raise typer.Exit(1) from exc
