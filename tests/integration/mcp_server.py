"""An MCP server built with the `mcp` SDK, for the daemon's MCP tests (stdio or HTTP).

python mcp_server.py stdio
python mcp_server.py http PORT
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("this tool always fails")


@server.tool()
def die() -> str:
    """Ends the server's process at once."""
    os._exit(3)


@server.tool()
async def slow() -> str:
    """Takes a minute."""
    await anyio.sleep(60)
    return "late"


@server.tool()
def secret() -> str:
    """Not in any allow list."""
    return "secret"


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
