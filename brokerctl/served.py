"""The ledger file a running daemon serves, for the commands that read the file
itself (`backup`): with `-s SOCK` it is the daemon's, not the one a config in the
current folder would name."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import typer

from wire.client import BrokerClient, BrokerError

ASK_TIMEOUT_S = 5.0


async def _ask(socket: Path) -> object:
    with anyio.fail_after(ASK_TIMEOUT_S):
        async with await BrokerClient.connect(socket) as client:
            health = await client.op("health")
    return health.get("ledger_path") if isinstance(health, dict) else None


def served_ledger(socket: Path | None, configured: Path) -> Path:
    """The file the daemon at `socket` serves; `configured` when no socket was given.
    A socket given but not answering is an error (exit 2): guessing could copy
    another ledger."""
    if socket is None:
        return configured
    try:
        served = anyio.run(_ask, socket)
    except (OSError, TimeoutError, BrokerError) as exc:
        print(
            f"brokerctl: cannot ask the broker at {socket} for its ledger: {exc};"
            " with the daemon stopped, name its config with -c instead",
            file=sys.stderr,
        )
        raise typer.Exit(2) from exc
    if not isinstance(served, str):
        print(f"brokerctl: the broker at {socket} keeps no ledger file", file=sys.stderr)
        raise typer.Exit(1)
    return Path(served)
