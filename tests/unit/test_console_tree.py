"""The console's turn tree: the head's line stays put, branches go deeper, forks hang on."""

from __future__ import annotations

from typing import Any

import pytest

from broker.console.tokens import TokenFileError, allows, parse
from broker.console.tree import rows


def turn(id_: str, parent: str | None, at: int) -> dict[str, Any]:
    return {"id": id_, "parent": parent, "started_at": at}


def test_a_branch_is_drawn_deeper_before_the_line_to_the_head_goes_on() -> None:
    turns = [turn("a", None, 1), turn("b", "a", 2), turn("x", "a", 3), turn("c", "b", 4)]
    forks = [{"label": "fork:1", "turn": "b", "kind": "fork"}]
    laid = rows(turns, forks, head="c")
    assert [(r.turn["id"], r.depth, r.branch, r.on_head) for r in laid] == [
        ("a", 0, False, True),
        ("x", 1, True, False),
        ("b", 0, False, True),
        ("c", 0, False, True),
    ]
    assert [f["label"] for f in laid[2].forks] == ["fork:1"]


def test_a_long_thread_does_not_recurse() -> None:
    turns = [turn(str(i), str(i - 1) if i else None, i) for i in range(20_000)]
    laid = rows(turns, [], head="19999")
    assert len(laid) == 20_000 and {r.depth for r in laid} == {0}


def test_tokens_and_roles() -> None:
    lines = ["# a comment", "read " + "r" * 20, "operate " + "o" * 20, "bare" * 5]
    tokens = parse("\n".join(lines) + "\n")
    assert tokens.role_of("rrrrrrrrrrrrrrrrrrrr") == "read"
    assert tokens.role_of("barebarebarebarebare") == "admin"
    assert tokens.role_of("nope") is None and tokens.role_of(None) is None
    assert allows("admin", "operate") and not allows("read", "operate")
    for bad in ("", "writer tttttttttttttttttttt", "admin short"):
        with pytest.raises(TokenFileError):
            parse(bad)
