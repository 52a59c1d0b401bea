"""Which open items a node hands over to their workflows again, at the Temporal
runtime's look at the ledger every `stuck_after_s` (broker/runtime).

An item is handed over again only when it was open at the node's last look too: one
acked since is being handed over by the node that acked it, and an item whose acking
node died before its hand-off is taken within two looks. Never one this node's own
signal landed: a landed signal is in the workflow's history, durably, and each signal
more is a workflow task that changes nothing. What the node remembers is bounded by
what is open: landed items that are no longer open are forgotten.
"""

from __future__ import annotations

from collections.abc import Set
from typing import NamedTuple


class Look(NamedTuple):
    again: frozenset[str]  # hand these over again
    open_before: frozenset[str]  # keep for the next look
    landed: frozenset[str]  # keep: this node's landed signals still open


def look(open_now: Set[str], open_before: Set[str], landed: Set[str]) -> Look:
    still_open_landed = frozenset(landed & open_now)
    again = frozenset(open_now & open_before) - still_open_landed
    return Look(again, frozenset(open_now), still_open_landed)
