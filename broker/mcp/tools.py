"""Tools from MCP servers, offered to every engine next to the broker's own (docs/mcp.md).

The broker keeps one client session per `[[mcp.servers]]` entry, opened in the
background when the daemon starts and opened again (the stdio server started
again) whenever it ends or a call finds it broken, with a growing pause between
tries. Only the tools in a server's `allow` list are offered, and a route rule's
`mcp` list narrows which servers a session's turns get; a call of a tool its
session was not offered is refused.

A tool call never fails the turn: a server that is down, a call that takes longer
than `engine.timeout_s`, a link that breaks under a call (the call is not made
again: the tool may have acted), or the tool's own error becomes an `EngineError`, which
the engine sees as the tool's answer with status `error`. The broker records the
call as an `action` event, as it does its own tools.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from broker.config import ConfigError, McpServerSettings, Settings
from broker.engines.base import EngineError
from core.engine_types import ToolSpec
from plumbing import logs

log = logs.get("broker.mcp")

FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 30.0


def check_mcp(settings: Settings, broker_tools: Iterable[str]) -> None:
    """At start: a tool name of the broker's allowed from a server, or a stdio command
    that is not found, is a ConfigError naming both."""
    if not settings.mcp.servers:
        return
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "[[mcp.servers]] needs the optional package mcp, which is not installed"
            f" ({exc}): pip install 'agent-broker[mcp]'"
        ) from exc
    ours = set(broker_tools)
    for server in settings.mcp.servers:
        for tool in server.allow:
            if tool in ours:
                raise ConfigError(
                    f"invalid configuration: mcp.servers {server.name!r} allows the tool"
                    f" {tool!r}, which is the name of the broker's own tool {tool!r};"
                    " one name cannot mean both"
                )
        if server.command and shutil.which(server.command[0]) is None:
            raise ConfigError(
                f"invalid configuration: mcp.servers {server.name!r}: command"
                f" {server.command[0]!r} is not found"
            )


def result_text(result: Any) -> str:
    """An MCP tool result as the text an engine gets."""
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


class Link:
    """One server: its client session while it is up, its tools as last listed."""

    def __init__(self, settings: McpServerSettings, folder: Path | None) -> None:
        self.settings = settings
        self.folder = folder
        self.client: Any = None  # mcp.Client while connected
        self.specs: dict[str, ToolSpec] = {}
        self.error: str | None = "not connected yet"
        self.broken = anyio.Event()
        self.up = anyio.Event()

    def target(self) -> Any:
        from mcp import StdioServerParameters

        if self.settings.url:
            return self.settings.url
        command = self.settings.command
        return StdioServerParameters(
            command=command[0], args=command[1:], cwd=str(self.folder) if self.folder else None
        )

    async def run(self) -> None:
        from mcp import Client

        pause = FIRST_PAUSE_S
        while True:
            try:
                async with Client(self.target()) as client:
                    listed = await client.list_tools()
                    self.specs = {
                        t.name: ToolSpec(t.name, t.description or "", t.input_schema)
                        for t in listed.tools
                        if t.name in self.settings.allow
                    }
                    self.client, self.error, pause = client, None, FIRST_PAUSE_S
                    self.broken = anyio.Event()
                    self.up.set()
                    log.info("MCP server connected", server=self.settings.name,
                             tools=sorted(self.specs))  # fmt: skip
                    await self.broken.wait()
            except Exception as exc:  # the server's failure, never the daemon's
                self.error = describe(exc)
                log.warning("MCP server unavailable", server=self.settings.name, error=self.error)
            finally:
                self.client = None
                if self.up.is_set():
                    self.up = anyio.Event()
            await anyio.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)

    def spec(self, name: str) -> ToolSpec:
        """Its spec as listed, else a plain one (a server that is down is still offered)."""
        return self.specs.get(name) or ToolSpec(
            name, f"A tool of the MCP server {self.settings.name!r}.", {"type": "object"}
        )

    async def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
        """One call, never repeated (the tool may have acted before the link broke). A
        server not up, or starting again, gets half the time to come up."""
        server = self.settings.name
        with anyio.move_on_after(timeout_s) as scope:
            if self.client is None:
                with anyio.move_on_after(timeout_s / 2):
                    await self.up.wait()
            client = self.client
            if client is None:
                raise EngineError(
                    f"the MCP server {server!r} is not available ({self.error}); its tool"
                    f" {name!r} cannot run now"
                )
            try:
                result = await client.call_tool(name, arguments)
            except Exception as exc:  # the link broke: `run` opens it again
                self.error = describe(exc)
                self.lost(client)
                raise EngineError(
                    f"the MCP server {server!r} failed on {name!r} ({self.error}); it is"
                    " being started again"
                ) from exc
            text = result_text(result)
            if result.is_error:
                raise EngineError(f"{name} ({server}) answered with an error: {text}")
            return text
        assert scope.cancelled_caught
        raise EngineError(f"the MCP tool {name!r} ({server}) did not answer within {timeout_s:g} s")

    def lost(self, client: Any) -> None:
        """`client` is broken: calls wait for the next one, which `run` opens."""
        if self.client is client:
            self.client = None
            if self.up.is_set():
                self.up = anyio.Event()
        self.broken.set()


def describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]


class McpTools:
    """Every configured server's allowed tools, by tool name."""

    def __init__(self, settings: Settings, folder: Path | None = None) -> None:
        self.timeout_s = settings.engine.timeout_s
        self.links = {s.name: Link(s, folder) for s in settings.mcp.servers}
        self.server_of = {tool: s.name for s in settings.mcp.servers for tool in s.allow}

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep every server's session (never waits for one: a server may be down)."""
        async with anyio.create_task_group() as tg:
            for link in self.links.values():
                tg.start_soon(link.run)
            task_status.started()

    def has(self, name: str) -> bool:
        return name in self.server_of

    def specs(self, servers: frozenset[str] | None) -> tuple[ToolSpec, ...]:
        """The tools offered to a turn whose rule allows `servers` (None: all)."""
        return tuple(
            self.links[server].spec(tool)
            for tool, server in self.server_of.items()
            if servers is None or server in servers
        )

    async def call(
        self, name: str, arguments: dict[str, Any], servers: frozenset[str] | None
    ) -> str:
        server = self.server_of[name]
        if servers is not None and server not in servers:
            raise EngineError(f"the tool {name!r} is not offered to this session")
        return await self.links[server].call(name, arguments, self.timeout_s)
