"""Every broker tool has a reach rule (broker/tools/table.py `REACH`): a tool added
without one fails here, and a tool of one's own session takes no argument that could
name another session."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker.engines.base import EngineError
from broker.tools import table as tools
from broker.tools.table import REACH, WORKER_SPECS, specs_for

pytestmark = pytest.mark.anyio
NAMING = frozenset({"session", "target", "turn", "label", "around_turn", "parent_session"})


def test_every_tool_offered_has_a_reach_rule() -> None:
    offered = {spec.name for kind in ("dm", "worker", "fork", "group") for spec in specs_for(kind)}
    assert offered == set(REACH), "a tool without a reach rule, or a rule without a tool"


@pytest.mark.parametrize("spec", WORKER_SPECS, ids=lambda s: s.name)
def test_a_tool_of_its_own_session_names_no_other(spec: Any) -> None:
    names = set(spec.parameters.get("properties", {}))
    if REACH[spec.name] == "own":
        assert not names & NAMING, f"{spec.name} takes {names & NAMING}: give it a checked rule"
    else:
        assert "checked" in REACH[spec.name], REACH[spec.name]


async def test_a_tool_with_no_reach_rule_is_not_run() -> None:
    with pytest.raises(EngineError, match="no tool named 'delete_everything'"):
        await tools.call(
            cast(Any, SimpleNamespace(mcp=None)), "dm:a", "t1", "delete_everything", {}
        )


async def test_recall_of_another_session_without_cross_session_is_refused_and_audited() -> None:
    """With `recall.cross_session` off (the default), naming any other session gets the
    one refusal sentence and an audit row, as any call past the turn's reach does."""
    from core.reach import REFUSED

    audited: list[dict[str, Any]] = []

    async def audit(**row: Any) -> None:
        audited.append(row)

    hub = SimpleNamespace(
        mcp=None,
        settings=SimpleNamespace(
            recall=SimpleNamespace(
                cross_session=False,
                budget_tokens=1000,
                neighbours_before=0,
                neighbours_after=0,
                model_dir="",
            )
        ),
        ledger=SimpleNamespace(audit=audit),
        counter=SimpleNamespace(count=len),
        wide=False,
    )
    for other in ("dm:bob", "*"):
        with pytest.raises(EngineError) as refused:
            await tools.call(
                cast(Any, hub),
                "dm:alice",
                "t1",
                "conversation_recall",
                {"action": "search", "query": "x", "session": other},
            )
        assert str(refused.value) == REFUSED
    assert [(r["op"], r["target"], r["outcome"]) for r in audited] == [
        ("conversation_recall", "dm:alice", "refused")
    ] * 2
