"""Engines: what produces a turn's reply. The broker core sees only `Engine`.

This package is also the engine authors' API, stable whatever the layout inside:
an engine of `kind = "python"` (docs/engines.md) imports `Engine`, `TurnIO`,
`TurnRequest`, `ChatMessage`, `EngineResult` and `EngineError` from
`broker.engines`, and `ToolCall` and `ToolSpec` for the tools it reports and is
offered. Names are only ever added here, never renamed or removed.
"""

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
