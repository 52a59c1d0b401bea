"""The Model Context Protocol both ways: MCP servers' tools offered to engines
(`tools.McpTools`, `[[mcp.servers]]`), and the broker as an MCP server is
`brokerctl mcp` (brokerctl/mcp.py). Needs the `mcp` extra."""

from __future__ import annotations

__all__: list[str] = []
