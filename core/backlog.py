"""The queue machine's backlog, which keeps items in `seq` order: a persistent sequence.

Every state of the machine is immutable, so a backlog that grew by copying a
tuple at each arrival would make a burst of n messages cost O(n²); versions of
this one share their storage instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeVar, overload

T = TypeVar("T")


class Backlog(Sequence[T]):
    """An immutable sequence: O(1) append and O(1) removal from the head.

    A collect burst or a long queue appends to the backlog once per arrival, so
    copying a tuple each time made a burst of n messages cost O(n²). Versions
    share one list: each sees `buf[start:end]`, and the list only ever grows
    past the end of the newest version, so what any version sees never changes.
    """

    __slots__ = ("_buf", "_end", "_start")
    _COMPACT_AT = 64  # items dropped from the head before the list is copied down

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._buf = list(items)
        self._start = 0
        self._end = len(self._buf)

    @classmethod
    def _view(cls, buf: list[T], start: int, end: int) -> Backlog[T]:
        view = cls.__new__(cls)
        view._buf, view._start, view._end = buf, start, end
        return view

    def append(self, item: T) -> Backlog[T]:
        """This backlog with `item` at the end (self is unchanged)."""
        start, end, buf = self._start, self._end, self._buf
        if end == start:
            return Backlog._view([item], 0, 1)
        if end == len(buf) and not (start > self._COMPACT_AT and start > end - start):
            buf.append(item)  # the newest version: nobody sees past `end`
            return Backlog._view(buf, start, end + 1)
        fresh = buf[start:end]
        fresh.append(item)
        return Backlog._view(fresh, 0, len(fresh))

    def __len__(self) -> int:
        return self._end - self._start

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Backlog[T]: ...

    def __getitem__(self, index: int | slice) -> T | Backlog[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return Backlog(tuple(self)[index])
            stop = max(start, stop)
            return Backlog._view(self._buf, self._start + start, self._start + stop)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("backlog index out of range")
        return self._buf[self._start + index]

    def __iter__(self) -> Iterator[T]:
        return islice(self._buf, self._start, self._end)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Backlog | tuple):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Backlog({tuple(self)!r})"
