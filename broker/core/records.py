"""`@record`: an immutable value type that costs what a plain dataclass costs to build.

A frozen dataclass sets every field through `object.__setattr__` in its `__init__`,
which makes it two to three times slower to build than a plain one with slots (about
1.9 µs against 0.6 µs for a six-field context message on the reference VM). The
types built on every turn (context messages and plans, engine requests, the queue
machine's events and actions) are built a dozen times a turn: making them records cut
the daemon's instructions per turn by 11% (bench.instructions, 943k to 841k).

Rule 1. A record is immutable by contract, and the contract is checked statically:
        `dataclass_transform(frozen_default=True)` makes mypy treat it as a frozen
        dataclass, so assigning to a field is a type error, and `scripts/test` (what
        CI runs) runs mypy over the whole code base. At run time nothing stops an
        assignment: never make one.
Rule 2. Otherwise it behaves as a frozen dataclass with slots: `__eq__` and `__hash__`
        by value, `dataclasses.replace`, `dataclasses.field`, pickling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """Make `cls` a slotted dataclass that hashes by value (see the module rules)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
