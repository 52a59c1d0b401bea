"""Structured logs: one JSON object per line on stderr, or a human format.

Every record may carry `session`, `turn`, `msg_id`, `conn` and `channel`; the
code binds them where they apply rather than formatting them into messages.
Every record passes the redactor (plumbing/redact.py) before it is written or
handed to a tap, so a secret in a message, a field or a traceback never leaves.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson

from plumbing import redact


def _import_structlog_without_rich() -> None:
    """structlog imports rich, for pretty tracebacks, whenever it is installed. Our
    records carry plain tracebacks, and rich's import is a seventh of a daemon's start
    (docs/performance.md, "The test suite"), so it is hidden from structlog's import."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` now fails
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


_import_structlog_without_rich()
import structlog  # noqa: E402

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

Processor = Callable[[Any, str, MutableMapping[str, Any]], Any]
_taps: list[Callable[[MutableMapping[str, Any]], None]] = []


def add_tap(tap: Callable[[MutableMapping[str, Any]], None]) -> None:
    """Receive a copy of every record that passes the level filter (for logs.follow)."""
    _taps.append(tap)


def remove_tap(tap: Callable[[MutableMapping[str, Any]], None]) -> None:
    if tap in _taps:
        _taps.remove(tap)


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return redact.active().event(event)


def _fan_out(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for tap in list(_taps):
        tap(dict(event))
    return event


def _json(event: MutableMapping[str, Any], **_kw: Any) -> str:
    return orjson.dumps(event, default=str).decode()


def configure(level: str = "info", fmt: str = "json") -> None:
    global _configuration
    renderer: Processor = (
        structlog.processors.JSONRenderer(serializer=_json)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact,
            _fan_out,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configuration += 1


_configuration = 0  # bumped by `configure`: loggers bound before it bind again


class Logger:
    """A named logger, bound once per configuration.

    structlog's own lazy proxy binds a new logger (and a new PrintLogger) on
    every call unless loggers are cached for good, which would pin the log
    level a reload sets; this binds again only after `configure`.
    """

    __slots__ = ("_bound", "_configuration", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._configuration = -1
        self._bound: Any = None

    def __getattr__(self, method: str) -> Any:
        if self._configuration != _configuration:
            self._bound = structlog.get_logger(self._name).bind()
            self._configuration = _configuration
        return getattr(self._bound, method)


def get(name: str) -> Any:
    return Logger(name)
