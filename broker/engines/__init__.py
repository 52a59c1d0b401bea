"""Engines: what produces a turn's reply. The broker core sees only `Engine`."""

from __future__ import annotations

from .base import (
    ChatMessage,
    Engine,
    EngineError,
    EngineResult,
    ToolCall,
    ToolSpec,
    TurnIO,
    TurnRequest,
)

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
