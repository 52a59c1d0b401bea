"""Build the configured engine."""

from __future__ import annotations

from broker.config import EngineSettings
from broker.engines.base import Engine
from broker.engines.echo import EchoEngine


def build_engine(settings: EngineSettings) -> Engine:
    if settings.kind == "echo":
        return EchoEngine(settings.chunks, settings.delay_ms, settings.context_window)
    if settings.kind == "subprocess":
        from broker.engines.subprocess_engine import SubprocessEngine

        if not settings.command:
            raise ValueError("engine.command is required for the subprocess engine")
        return SubprocessEngine(settings.command, settings.context_window)
    from broker.engines.openai_engine import OpenAIEngine

    return OpenAIEngine(
        settings.base_url, settings.model, settings.api_key, settings.context_window
    )
