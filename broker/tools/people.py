"""`propose_merge`: the agent says that a contact is a person it knows of.

The agent never merges: it records a proposal (ledger/proposals.py) that an operator
(`brokerctl merges accept N`) or an owner in chat (`/merge yes N`) decides. Both
entities must be ones the turn reaches (core/reach.py `may_reach_entity`), checked in
the transaction that records it; past that the call answers the one refusal
sentence, audited there, and nothing is recorded.
"""

from __future__ import annotations

from typing import Any

import orjson

from broker.engines.base import EngineError
from broker.tools.context import ToolContext
from core.engine_types import ToolSpec
from core.proposals import REASON_LIMIT, check_proposal
from core.reach import REFUSED
from ledger.port.records import Reaching
from plumbing import logs
from plumbing.ids import now_ms

log = logs.get("broker.tools")

PROPOSE_MERGE = ToolSpec(
    name="propose_merge",
    description=(
        "Propose that two entities are one person: 'contact' (an entity id, such as a"
        " sender's) is 'person' (the entity that stays, often one named as a person)."
        " Say why in 'reason'. Nothing merges until an owner or an operator accepts;"
        " the answer gives the proposal's number."
    ),
    parameters={
        "type": "object",
        "properties": {
            "contact": {"type": "string", "description": "The entity to merge."},
            "person": {"type": "string", "description": "The entity it is."},
            "reason": {"type": "string", "maxLength": REASON_LIMIT},
        },
        "required": ["contact", "person", "reason"],
    },
)


async def propose_merge(
    hub: ToolContext, session: str, turn: str, arguments: dict[str, Any]
) -> str:
    try:
        contact, person, reason = check_proposal(
            arguments.get("contact"), arguments.get("person"), arguments.get("reason")
        )
    except ValueError as exc:
        raise EngineError(f"propose_merge: {exc}") from exc
    by = Reaching(session, PROPOSE_MERGE.name, hub.wide)
    found = await hub.ledger.propose_merge(by, turn, contact, person, reason, now_ms())
    if found is None:  # audited by the proposal's own transaction
        log.warning(
            "tool call refused: past its turn's reach",
            session=session,
            turn=turn,
            tool=PROPOSE_MERGE.name,
        )
        raise EngineError(REFUSED)
    n = found["proposal"]
    log.info("merge proposed", session=session, proposal=n, contact=contact, person=person)
    return orjson.dumps(
        {
            "proposal": n,
            "status": found["status"],
            "note": f"An owner accepts it with /merge yes {n}, or an operator with"
            f" brokerctl merges accept {n}.",
        }
    ).decode()
