"""What a running turn learns from its session's workflow while it runs: the
control state (workflow.py), asked for by query or pushed to its node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Control:
    abort: str | None
    steer: list[list[Any]]
    commands: list[list[Any]] = field(default_factory=list)  # arrived while it runs
    waiting: int = 0  # items in the queue behind it (`/status`)


@dataclass
class ControlPush:
    """The running turn's control state, pushed to its node."""

    label: str
    turn_no: int
    control: Control
