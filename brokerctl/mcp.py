"""`brokerctl mcp`: the broker as an MCP server on stdio (docs/mcp.md).

Each tool is one op of the running daemon, over its socket, as the uid that runs
this command: `sessions_list` (`sessions.list`), `session_history` (`session.show`,
paged here), `recall_search` (`recall.search`) and `send_message` (`agent_send`,
a task queued on the session). The daemon alone decides what that uid may do (its
operator role); a refusal, or any other error answer, is the tool's error with the
daemon's sentence, and the server goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from wire.client import BrokerClient, BrokerError

PAGE_MAX = 200


def build(socket: Path) -> MCPServer:
    server = MCPServer(
        "agent-broker",
        instructions=(
            "The agent-broker daemon: list its sessions, read a session's turns, search"
            " the archive, and queue a message into a session."
        ),
    )

    async def ask(name: str, **args: Any) -> Any:
        try:
            async with await BrokerClient.connect(socket) as client:
                return await client.op(name, **{k: v for k, v in args.items() if v is not None})
        except BrokerError as exc:
            raise ToolError(f"{name}: {exc.code}: {exc.frame.get('message')}") from exc
        except OSError as exc:
            raise ToolError(f"cannot reach the broker at {socket}: {exc.strerror or exc}") from exc

    @server.tool()
    async def sessions_list(status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The broker's sessions: label, status, state, turns, queued, parent."""
        rows: list[dict[str, Any]] = await ask("sessions.list", status=status, limit=limit)
        return rows

    @server.tool()
    async def session_history(session: str, page: int = 0, page_size: int = 20) -> dict[str, Any]:
        """A session's turns, oldest first: page 0 holds the latest `page_size` turns,
        page 1 the ones before them, and so on; `more` says whether older turns exist."""
        if page < 0 or not 1 <= page_size <= PAGE_MAX:
            raise ToolError(f"page must be >= 0 and page_size between 1 and {PAGE_MAX}")
        window = (page + 1) * page_size
        data: dict[str, Any] = await ask("session.show", session=session, limit=window + 1)
        turns: list[dict[str, Any]] = data.get("turns", [])
        more = len(turns) > window
        older = turns[1:] if more else turns
        shown = older[: max(0, len(older) - page * page_size)][-page_size:]
        return {
            "session": data.get("label", session),
            "state": data.get("state"),
            "page": page,
            "turns": shown,
            "more": more,
        }

    @server.tool()
    async def recall_search(
        query: str, session: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """Full-text search of the archive, in one session or all of them."""
        hits: list[dict[str, Any]] = await ask(
            "recall.search", query=query, session=session, limit=limit
        )
        return hits

    @server.tool()
    async def send_message(session: str, text: str) -> dict[str, Any]:
        """Queue `text` into `session` as the operator; the session's agent takes it as a
        task in its next turn."""
        done: dict[str, Any] = await ask(
            "agent_send",
            op="dispatch",
            target={"kind": "session", "session": session},
            task=text,
        )
        return done

    return server


def serve(socket: Path) -> None:
    build(socket).run("stdio")
