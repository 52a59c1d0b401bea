"""Merge proposals: an agent says that a contact is a person, and a person decides.

Pure code, no I/O. A proposal is decided once: `pending` becomes `accepted` or
`rejected`, and a decided one refuses a second decision whatever it says, so a
repeated `/merge yes N` (a command run again after a crash, two owners at once)
never merges twice. The chat command's words are parsed here; a malformed one is a
`ValueError` whose message says how to write it. An accepted proposal is merged as
`entity.merge {from: contact, into: person}` is, so the person stays canonical.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "REASON_LIMIT",
    "USAGE",
    "Decided",
    "Status",
    "check_proposal",
    "decide",
    "parse_verdict",
]

Status = Literal["pending", "accepted", "rejected"]
REASON_LIMIT = 500  # characters of a proposal's reason
USAGE = "usage: /merge yes N or /merge no N (N: the proposal's number)"


class Decided(ValueError):
    """The proposal was decided before; nothing changes."""


def decide(status: str, accept: bool) -> Status:
    """The status a decision moves a proposal in `status` to."""
    if status != "pending":
        raise Decided(f"it was already {status}")
    return "accepted" if accept else "rejected"


def parse_verdict(args: str) -> tuple[bool, int]:
    """`/merge`'s arguments: (accept, the proposal's number)."""
    words = args.split()
    if len(words) != 2 or words[0].lower() not in ("yes", "no") or not words[1].isdigit():
        raise ValueError(USAGE)
    number = int(words[1])
    if number < 1 or number > 2**62:
        raise ValueError(USAGE)
    return words[0].lower() == "yes", number


def check_proposal(contact: object, person: object, reason: object) -> tuple[str, str, str]:
    """The tool's arguments checked: (contact, person, reason); a `ValueError` names
    the argument that is wrong."""
    for name, value in (("contact", contact), ("person", person)):
        if not isinstance(value, str) or not value.strip() or len(value) > 64:
            raise ValueError(f"'{name}' must be an entity id")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("'reason' must say why they are one person")
    assert isinstance(contact, str) and isinstance(person, str)
    if contact.strip() == person.strip():
        raise ValueError("'contact' and 'person' are the same entity")
    return contact.strip(), person.strip(), " ".join(reason.split())[:REASON_LIMIT]
