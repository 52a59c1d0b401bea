"""`worker_done`: a worker reports its task's result to the session that dispatched it.

The report is one transaction (ledger/dispatch.py `report`): it ends every open
dispatch whose task the worker has taken and queues each one's single `worker_result`
in its parent's queue, and its items are handed to the parents' actors only after that
commit. A report on a task that already ended (reported, timed out; or a turn run
again after a crash that reports a second time) changes nothing and says so: each
dispatch has exactly one result.
"""

from __future__ import annotations

from typing import Any

import orjson

from broker.engines.base import EngineError
from broker.tools.context import ToolContext
from core.engine_types import ToolSpec
from ledger.port.errors import LedgerLookupError
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.tools")
RESULT_MAX = 100_000  # characters, as the task of `agent_send`

WORKER_DONE = ToolSpec(
    name="worker_done",
    description=(
        "Finish the task you were dispatched: 'result' goes back to the agent that asked."
        " Until you call it you may take several turns (wait for your own workers or a"
        " timer); a turn that ends without it and waits for nothing reports its reply."
    ),
    parameters={
        "type": "object",
        "properties": {"result": {"type": "string"}},
        "required": ["result"],
    },
)


async def worker_done(hub: ToolContext, session: str, arguments: dict[str, Any]) -> str:
    result = arguments.get("result")
    if not isinstance(result, str) or not result.strip() or len(result) > RESULT_MAX:
        raise EngineError(f"worker_done needs 'result', text of 1..{RESULT_MAX} characters")
    try:
        reported = await hub.ledger.report_worker_done(session, result, now_ms())
    except LedgerLookupError as exc:  # ended already: nothing changes
        raise EngineError(f"worker_done refused: {exc}") from exc
    for item in reported.items:  # committed
        hub.post(item)
    log.info("worker reported", session=session, dispatches=list(reported.dispatches))
    return orjson.dumps({"reported": True, "dispatches": list(reported.dispatches)}).decode()
