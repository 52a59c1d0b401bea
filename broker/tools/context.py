"""What the broker tools (broker/tools/table.py) see of the daemon: `ToolContext`.

The mailbox registry provides it; a tool reaches nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from broker.config import Settings
from broker.context import TokenCounter
from broker.mcp.tools import McpTools
from ledger.port.protocols import LedgerPort
from ledger.port.records import Dispatched, Handoff, ItemInfo, Reaching


class ToolContext(Protocol):
    """What the tools need of the daemon (the mailbox registry provides it)."""

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def counter(self) -> TokenCounter: ...

    @property
    def settings(self) -> Settings: ...

    async def dispatch(
        self,
        *,
        parent: str | None,
        parent_turn: str | None,
        tool_call: str | None,
        target: dict[str, Any],
        task: str,
        handoff: Handoff | None = None,
        reaching: Reaching | None = None,
    ) -> Dispatched: ...

    @property
    def wide(self) -> tuple[tuple[str, str], ...]:
        """The owner contacts whose route grants reach "any" (policies/model.py)."""

    def post(self, item: ItemInfo) -> None:
        """Hand a committed item (a worker's result) to its session's actor."""

    def compact_later(self, label: str, focus: str | None) -> None: ...

    def state_record(self, label: str) -> str | None: ...

    def scratchpad_merged(self, label: str, pad: Any, at: int) -> None: ...

    @property
    def timers_changed(self) -> Callable[[], None]: ...

    @property
    def mcp(self) -> McpTools | None:
        """The MCP servers' tools (broker/mcp/tools.py); None: no server configured."""

    def mcp_servers(self, label: str) -> frozenset[str] | None:
        """The MCP servers whose tools `label`'s turns get (its route rule's `mcp`); None: all."""
