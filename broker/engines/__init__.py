"""Engines: what produces a turn's reply. The broker core sees only `Engine`."""

from __future__ import annotations

from broker.engines.base import Engine, EngineError, TurnIO
from core.engine_types import ChatMessage, EngineResult, ToolCall, ToolSpec, TurnRequest

__all__ = [
    "ChatMessage",
    "Engine",
    "EngineError",
    "EngineResult",
    "ToolCall",
    "ToolSpec",
    "TurnIO",
    "TurnRequest",
]
