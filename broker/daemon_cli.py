"""`brokerd`: run the daemon."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import anyio
import typer

from broker.config import (
    EX_CONFIG,
    ConfigError,
    Settings,
    config_path,
    configure_redaction,
    load_rules,
    load_settings,
)
from broker.daemon import LedgerLost, StartupError, backend_options, run_until_signalled
from broker.engines.factory import check_engines
from broker.mcp.tools import check_mcp
from broker.tools.table import WORKER_SPECS
from plumbing import gc_policy, logs, redact

app = typer.Typer(
    pretty_exceptions_enable=False, add_completion=False, help="The agent session broker daemon."
)


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML config file (or BROKER_CONFIG).")
    ] = None,
    backend: Annotated[
        str, typer.Option("--backend", help="Event loop: asyncio (uvloop when installed) or trio.")
    ] = "asyncio",
    check: Annotated[
        bool, typer.Option("--check-config", help="Validate the config and exit.")
    ] = False,
) -> None:
    try:
        settings = load_settings(config)
        load_rules(settings)
    except ConfigError as exc:
        print(f"brokerd: {exc}", file=sys.stderr)
        raise typer.Exit(EX_CONFIG) from exc
    if backend not in ("asyncio", "trio"):
        print(f"brokerd: invalid --backend {backend!r}: use asyncio or trio", file=sys.stderr)
        raise typer.Exit(EX_CONFIG)
    if settings.runtime.kind == "temporal" and backend != "asyncio":
        print('brokerd: runtime.kind = "temporal" needs --backend asyncio', file=sys.stderr)
        raise typer.Exit(EX_CONFIG)
    kinds = {e.kind for e in (settings.engine, *settings.engines.values())}
    for kind in sorted(kinds & {"openai-agents", "adk", "langgraph"}):  # asyncio only
        if backend != "asyncio":
            print(f'brokerd: engine kind "{kind}" needs --backend asyncio', file=sys.stderr)
            raise typer.Exit(EX_CONFIG)
    for problem in (unusable_env_key, missing_extra, unusable_otlp_env):  # in this order
        if (sentence := problem(settings)) is not None:
            print(f"brokerd: {sentence}", file=sys.stderr)
            raise typer.Exit(EX_CONFIG)
    try:
        check_engines(settings, config_path(config))  # the operator's code, found now
        check_mcp(settings, [spec.name for spec in WORKER_SPECS])
    except ConfigError as exc:
        print(f"brokerd: {exc}", file=sys.stderr)
        raise typer.Exit(EX_CONFIG) from exc
    if check:
        print("brokerd: configuration is valid")
        return
    configure_redaction(settings)
    logs.configure(settings.log_level, settings.log_format)
    chosen: Literal["asyncio", "trio"] = "trio" if backend == "trio" else "asyncio"
    gc_policy.tune()
    try:
        anyio.run(
            run_until_signalled,
            settings,
            config_path(config),
            backend=chosen,
            backend_options=backend_options(chosen),
        )
    except StartupError as exc:
        print(f"brokerd: cannot start: {redact.text(str(exc))}", file=sys.stderr)
        raise typer.Exit(exc.status) from exc
    except LedgerLost as exc:
        print(f"brokerd: stopped: {redact.text(str(exc))}", file=sys.stderr)
        raise typer.Exit(exc.status) from exc


# What a config's choice needs that a plain install lacks: (module, the extra).
EXTRAS = {
    ("ledger", "postgres"): ("psycopg", "postgres"),
    ("runtime", "temporal"): ("temporalio", "temporal"),
    ("engine", "openai-agents"): ("agents", "openai-agents"),
    ("engine", "adk"): ("google.adk", "adk"),
    ("engine", "langgraph"): ("langgraph", "langgraph"),
}


def missing_extra(settings: Settings) -> str | None:
    """The sentence for a chosen backend whose optional package is not installed. A
    config error (78), not a crash: it holds until the operator installs the extra,
    so a supervisor restarting the daemon would only fail again."""
    chosen: set[tuple[str, str]] = {
        ("ledger", settings.ledger.kind),
        ("runtime", settings.runtime.kind),
    }
    chosen |= {("engine", e.kind) for e in (settings.engine, *settings.engines.values())}
    for (section, kind), (module, extra) in EXTRAS.items():
        if (section, kind) not in chosen:
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return (
                f'{section}.kind = "{kind}" needs the optional package {module}, which is'
                f" not installed ({exc}): pip install 'agent-broker[{extra}]'"
            )
    for key, value, modules, extra in (
        ("tracing.otlp_endpoint", settings.tracing.otlp_endpoint, TRACING, "tracing"),
        ("console.address", settings.console.address, CONSOLE, "console"),
    ):
        for module in modules if value else ():
            try:
                importlib.import_module(module)
            except ImportError as exc:
                return (
                    f"{key} needs the optional package {module}, which is not installed"
                    f" ({exc}): pip install 'agent-broker[{extra}]'"
                )
    return None


def unusable_env_key(settings: Settings) -> str | None:
    """The sentence for an OPENAI_API_KEY an `openai` engine without `api_key` would
    send and that cannot go into an HTTP header (config.py checks `api_key` itself)."""
    engines = [settings.engine, *settings.engines.values()]
    if not any(e.kind == "openai" and e.api_key is None for e in engines):
        return None
    key = os.environ.get("OPENAI_API_KEY")
    if key is None or all(" " < ch <= "~" for ch in key):
        return None
    return (
        "OPENAI_API_KEY (the key of an openai engine without engine.api_key) must be"
        " printable ASCII without spaces: it goes into an HTTP header"
    )


def unusable_otlp_env(settings: Settings) -> str | None:
    """The sentence for an `OTEL_EXPORTER_OTLP_*` variable the trace exporter would not
    take (broker/observe/otlp_http.py), when tracing is on."""
    if not settings.tracing.otlp_endpoint:
        return None
    from broker.observe.otlp_http import OtlpHttp

    try:
        OtlpHttp.to(settings.tracing.otlp_endpoint).close()
    except ValueError as exc:
        return f"tracing.otlp_endpoint: {exc}"
    return None


TRACING = ("opentelemetry.sdk", "opentelemetry.proto", "requests")
CONSOLE = ("starlette", "jinja2", "hypercorn")


def main() -> None:
    app()
