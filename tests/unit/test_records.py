"""`core.records.record`: value semantics at run time, immutability checked by mypy."""

from __future__ import annotations

import dataclasses
import pickle
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from core.packing import Msg, TurnBlock
from core.queue_machine import Item, StartTurn


def test_a_record_compares_hashes_copies_and_pickles_by_value() -> None:
    item = Item("i1", 1, "followup", "person")
    start = StartTurn(1, (item,), "turn")
    same = StartTurn(1, (item,), "turn")
    assert start == same and hash(start) == hash(same)
    assert len({start, same}) == 1
    assert dataclasses.replace(start, turn_no=2) == StartTurn(2, (item,), "turn")
    assert pickle.loads(pickle.dumps(start)) == start
    assert not hasattr(start, "__dict__")  # slots


def test_a_record_keeps_its_post_init_and_computed_fields() -> None:
    block = TurnBlock("t1", (Msg("user", "a", 3), Msg("assistant", "b", 4)))
    assert block.tokens == 7
    assert block == TurnBlock("t1", (Msg("user", "a", 3), Msg("assistant", "b", 4)))
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        Msg("user", "a", -1)


def test_mypy_rejects_an_assignment_to_a_record_field(tmp_path: Path) -> None:
    """The immutability that run time does not enforce is a type error."""
    source = tmp_path / "mutates.py"
    source.write_text(
        textwrap.dedent(
            """
            from core.packing import Msg
            from core.records import record

            @record
            class Point:
                x: int

            Point(1).x = 2
            Msg("user", "a", 3).tokens = 4
            Point(x="not an int")
            """
        )
    )
    out, _err, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ]
    )
    assert status == 1, out
    assert 'Property "x" defined in "Point" is read-only' in out
    assert 'Property "tokens" defined in "Msg" is read-only' in out
    assert 'Argument "x" to "Point" has incompatible type "str"; expected "int"' in out
