"""How records cross to the writer process (ledger/writer_process.py) cheaply.

Every job and its result go by pickle. A named tuple pickles by default
through `__getnewargs__` and `copyreg.__newobj__`, calls back into Python
and saves two globals per record; reduced to its class and a plain tuple it
pickles almost entirely in C. Counted with callgrind on jobs captured from
`bench.turns`: 42.0k -> 36.3k instructions to pickle an ingest job, 66.0k ->
60.8k for a turn commit.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])


def pickled_as_tuple(cls: type[T]) -> type[T]:
    """Class decorator for a NamedTuple: pickle it as `(cls, tuple(self))`."""

    def __reduce__(self: T) -> tuple[type[T], tuple[Any, ...]]:
        return cls, tuple(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    return cls
