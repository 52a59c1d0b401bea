"""brokerctl's global options after the command's name (`hoist_globals`)."""

from __future__ import annotations

import pytest

from brokerctl.app import hoist_globals


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["sessions", "--json"], ["--json", "sessions"]),
        (["-s", "a.sock", "sessions", "--json"], ["-s", "a.sock", "--json", "sessions"]),
        (["doctor", "-s", "a.sock"], ["-s", "a.sock", "doctor"]),
        (["backup", "--socket=a.sock", "out.db"], ["--socket=a.sock", "backup", "out.db"]),
        (
            ["show", "dm:x", "--limit", "3", "-c", "b.toml"],
            ["-c", "b.toml", "show", "dm:x", "--limit", "3"],
        ),
        (["send", "--", "--json"], ["send", "--", "--json"]),  # after `--`, words
        (["--json", "health"], ["--json", "health"]),
        (["--version"], ["--version"]),
        ([], []),
    ],
)
def test_global_options_move_before_the_command(argv: list[str], parsed: list[str]) -> None:
    assert hoist_globals(argv) == parsed
