"""`@record`: an immutable value type that costs what a plain dataclass costs to build.

A frozen dataclass sets every field through `object.__setattr__` in its `__init__`,
and the daemon builds many records a turn (docs/performance.md).

A record is immutable by contract, and the contract is checked statically:
`dataclass_transform(frozen_default=True)` makes mypy treat it as a frozen dataclass,
so assigning to a field is a type error, and `scripts/test` (what CI runs) runs mypy
over the whole code base. At run time nothing stops an assignment: never make one.
Otherwise it behaves as a frozen dataclass with slots: `__eq__` and `__hash__` by
value, `dataclasses.replace`, `dataclasses.field`, pickling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """Make `cls` a slotted dataclass that hashes by value (see the module rules)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
