"""Sessions that end: the closing summary and where a closed session's next message goes.

Pure code, no I/O. A closed session takes no more turns; the next message its
key leads to opens a successor, labelled by the key and a number (`dm:ent_x~2`,
then `~3`), that names the closed one in `extends`. The label is stable: the walk
from the key always reaches the same successor, and a label that is taken by
anything not extending the chain (a fork so named, an alias) is stepped over, so
one person's messages never land in a session that is not theirs. A mechanical
closing summary is made of the thread's turn titles alone, never of their text,
and is bounded.

A session also closes by itself once no person has written to it for its idle
limit (`IdleClose`): the limit of its persona where the persona names one, else the
default, and 0 never. Only a person's message counts, as for the reset policies
(core/resets.py): a timer or a worker never keeps a session open, and a session no
person ever wrote to (a library session) never closes by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

MAX_SUMMARY = 2000
SEPARATOR = "~"
MAX_WALK = 100_000  # a bound on the successors walked: a chain longer than this is a bug


@dataclass(frozen=True, slots=True)
class Held:
    """What holds a candidate label: a session (its status and the session it
    extends) or an alias (`status` "alias", `extends` None)."""

    status: str
    extends: str | None


@dataclass(frozen=True, slots=True)
class Successor:
    label: str
    extends: str  # the closed session it follows
    create: bool  # True: no such session yet, the caller creates it


def successor(closed: str, held: Callable[[str], Held | None]) -> Successor:
    """Where a message for the closed session `closed` goes: the first successor of
    the chain that is not closed, or a new one after the last closed one."""
    previous = closed
    for number in range(2, MAX_WALK):
        candidate = f"{closed}{SEPARATOR}{number}"
        found = held(candidate)
        if found is None:
            return Successor(candidate, previous, True)
        if found.extends != previous:  # someone else's label: step over it
            continue
        if found.status != "closed":
            return Successor(candidate, previous, False)
        previous = candidate
    raise ValueError(f"more than {MAX_WALK} closed successors of {closed!r}")


def mechanical_summary(titles: Sequence[str | None], turns: int, more: bool = False) -> str:
    """A closing summary from the thread's turn titles, oldest first; `more`: the
    thread has older turns than these."""
    named = [t.strip() for t in titles if t and t.strip()]
    count = f"more than {turns}" if more else str(turns)
    if turns == 0 or not named:
        return "Closed with no turns." if turns == 0 else f"Closed after {count} turn(s)."
    out = (
        f"Closed after {count} turn(s): "
        if not more
        else f"Closed after {count} turn(s), the latest: "
    )
    for number, title in enumerate(named):
        piece = title if number == 0 else f"; {title}"
        if len(out) + len(piece) + 1 > MAX_SUMMARY:
            return out + "; …"
        out += piece
    return out + "."


def close_refusal(queued: int, running: int, timers: int) -> str | None:
    """Why a session may not close now (what is pending), or None."""
    pending = [
        f"{n} {what}"
        for n, what in (
            (running, "running item(s)"),
            (queued, "queued item(s)"),
            (timers, "live timer(s)"),
        )
        if n
    ]
    if not pending:
        return None
    return (
        f"the session has {', '.join(pending)}; close it once they are done"
        " (or cancel them: item.cancel, timer.cancel)"
    )


class IdleClose(NamedTuple):  # a named tuple: it goes to the writer process
    """How long a session may go without a person's message before it closes."""

    default_s: float = 0.0  # 0: never
    personas: tuple[tuple[str, float], ...] = ()  # (persona, limit) overriding the default

    @property
    def active(self) -> bool:
        return self.default_s > 0 or any(limit > 0 for _, limit in self.personas)

    def groups(self) -> list[tuple[tuple[str, ...] | None, float]]:
        """The sessions to look at, as (personas, limit) with a limit above 0: each
        overriding persona alone, then `None`, every other session, with the default."""
        out: list[tuple[tuple[str, ...] | None, float]] = [
            ((name,), limit) for name, limit in self.personas if limit > 0
        ]
        if self.default_s > 0:
            out.append((None, self.default_s))
        return out

    def limit_for(self, persona: str | None) -> float:
        """The idle limit of a session of `persona` (0: never)."""
        for name, limit in self.personas:
            if name == persona:
                return limit
        return self.default_s

    def overridden(self) -> tuple[str, ...]:
        """The personas whose sessions the default does not apply to."""
        return tuple(name for name, _ in self.personas)


def idle_cutoff(limit_s: float, now: int) -> int:
    """The latest time a person's last message may be at for a session idle since
    then to close at `now` (ms)."""
    return now - int(limit_s * 1000)
