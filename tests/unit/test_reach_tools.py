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
