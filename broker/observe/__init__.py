"""Seeing inside the daemon: the hooks' hub, Prometheus metrics, OpenTelemetry traces.

The daemon's code reports what happens to `hub.observer`; `metrics` turns it
into Prometheus figures served by `http`, and `tracing` (the `tracing` extra)
into spans, written as OTLP bytes by `otlp_wire` and posted by `otlp_http` from
the exporter process of `trace_export`.
"""

from broker.observe.hub import Observer, install

__all__ = ["Observer", "install"]
