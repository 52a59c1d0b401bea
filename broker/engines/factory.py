"""Build the configured engine."""

from __future__ import annotations

from pathlib import Path

from broker.config import CODE_ENGINES, EngineSettings, Settings
from broker.engines.base import Engine
from broker.engines.echo import EchoEngine
from broker.engines.loader import add_config_folder, entry_key, entry_of, resolve


def build_engine(settings: EngineSettings) -> Engine:
    if settings.kind == "echo":
        return EchoEngine(settings.chunks, settings.delay_ms, settings.context_window)
    if settings.kind == "subprocess":
        from broker.engines.subprocess_engine import SubprocessEngine

        if not settings.command:
            raise ValueError("engine.command is required for the subprocess engine")
        return SubprocessEngine(settings.command, settings.context_window)
    if settings.kind == "python":
        from broker.engines.python_engine import load_python_engine

        return load_python_engine(settings)
    if settings.kind == "openai-agents":
        from broker.engines.agents_engine import load_agents_engine

        return load_agents_engine(settings)
    if settings.kind == "adk":
        from broker.engines.adk_engine import load_adk_engine

        return load_adk_engine(settings)
    if settings.kind == "langgraph":
        from broker.engines.langgraph_engine import load_langgraph_engine

        return load_langgraph_engine(settings)
    from broker.engines.openai_engine import OpenAIEngine

    return OpenAIEngine(
        settings.base_url, settings.model, settings.api_key, settings.context_window
    )


def check_engines(settings: Settings, config: Path | None) -> None:
    """Resolve every engine's code at start (the default and the named ones)."""
    add_config_folder(config)
    sections = {"engine": settings.engine} | {
        f"engines.{name}": engine for name, engine in settings.engines.items()
    }
    for section, engine in sections.items():
        if engine.kind not in CODE_ENGINES:
            continue
        found = resolve(entry_of(engine), entry_key(engine, section))
        if engine.kind == "python":
            from broker.engines.python_engine import check_entry

            check_entry(found, entry_key(engine, section), entry_of(engine) or "")
        elif engine.kind == "langgraph":
            from broker.engines.langgraph_engine import check_graph

            check_graph(found, entry_key(engine, section), entry_of(engine) or "")
        elif engine.kind == "adk":
            from broker.engines.adk_engine import check_adk_agent

            check_adk_agent(found, entry_key(engine, section), entry_of(engine) or "")
        else:
            from broker.engines.agents_engine import check_agent

            check_agent(found, entry_key(engine, section), entry_of(engine) or "")
