"""broker/ops/roles.py: every op has its role, written once; peers' roles."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest

from broker.config import OperatorSettings, load_settings
from broker.ops import roles
from broker.ops.table import Ops


def ops_table() -> set[str]:
    return set(Ops(cast(Any, None), lambda label: "idle").table)


def test_every_op_has_a_role() -> None:
    missing = ops_table() - set(roles.ROLES)
    assert not missing, f"ops without a role in broker/ops/roles.py: {sorted(missing)}"


def test_every_role_written_is_of_an_op() -> None:
    # entity.erase is the next issue's (its role is written ahead of it).
    assert set(roles.ROLES) - ops_table() <= {"entity.erase"}


def test_an_op_with_no_role_needs_admin() -> None:
    assert roles.needed("session.obliterate", {}) == "admin"


@pytest.mark.parametrize(
    ("op", "args", "need"),
    [
        ("health", {}, "read"),
        ("audit.list", {}, "read"),
        ("entity.merge", {"from": "a", "into": "b"}, "operate"),
        ("snapshots.gc", {}, "admin"),
        ("entity.erase", {}, "admin"),
        ("store.call", {"call": "get"}, "read"),
        ("store.call", {"call": "append"}, "operate"),
        ("store.call", {}, "operate"),
    ],
)
def test_needed(op: str, args: dict[str, Any], need: str) -> None:
    assert roles.needed(op, args) == need


def test_roles_of_peers() -> None:
    table: dict[int, roles.Role] = {1000: "read", 1001: "admin"}
    me = os.getuid()
    assert roles.role_of(0, "read", table, 4242) == "admin"
    assert roles.role_of(4242, "read", table, 4242) == "admin"
    assert roles.role_of(1000, "operate", table, me) == "read"
    assert roles.role_of(1001, "read", table, me) == "admin"
    assert roles.role_of(2000, "read", table, me) == "read"
    assert roles.role_of(None, "operate", table, me) == "operate"
    assert roles.allows("admin", "read") and roles.allows("operate", "operate")
    assert not roles.allows("read", "operate") and not roles.allows("operate", "admin")


def test_the_audit_target_is_what_was_acted_on_never_the_rest() -> None:
    assert roles.target_of("entity.merge", {"from": "e1", "into": "e2"}) == "e1"
    assert roles.target_of("session.fork", {"turn": "t1", "label": "x"}) == "t1"
    sent = {"op": "dispatch", "task": "secret plan", "target": {"kind": "session", "session": "s"}}
    assert roles.target_of("agent_send", sent) == "s"
    stored = {"call": "append", "args": {"session": "lib:1", "items": ["hi"]}}
    assert roles.target_of("store.call", stored) == "lib:1"
    assert roles.target_of("timer.add", {"text": "wake"}) is None


def test_operators_config(tmp_path: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[operators]\ndefault_role = "read"\n[[operators.uids]]\nuid = 1000\nrole = "admin"\n'
    )
    ops = load_settings(path).operators
    assert ops.default_role == "read" and ops.roles() == {1000: "admin"}
    assert OperatorSettings().default_role == "operate"


def test_brokerctl_audit_since() -> None:
    from brokerctl.audit import since_ms

    now = 1_800_000_000.0
    assert since_ms("30m", now) == int((now - 1800) * 1000)
    assert since_ms("2d", now) == int((now - 172_800) * 1000)
    assert since_ms("1700000000000", now) == 1_700_000_000_000
    assert since_ms("2026-01-31T09:00", now) == since_ms("2026-01-31T09:00:00+00:00", now)
    with pytest.raises(ValueError, match="Invalid isoformat"):
        since_ms("yesterday", now)
