"""The README's exit-status table, as it happens: a start that cannot work exits
with the status the table gives, and a missing folder for the socket or the
ledger is made, not refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from broker.config import EX_CONFIG
from tests.harness import DaemonProcess, brokerd_once, write_config

ROOT = Path(__file__).resolve().parents[2]
EX_CANTCREAT = 73


def config(tmp: Path, socket: Path, **extra: dict[str, object]) -> Path:
    path = tmp / "broker.toml"
    write_config(path, {"socket_path": str(socket), "ledger": {"path": str(tmp / "l.db")}, **extra})
    return path


def readme_table() -> dict[int, str]:
    """status -> its row, from the README's table."""
    text = (ROOT / "README.md").read_text()
    return {int(m[1]): m[0] for m in re.finditer(r"^\| (\d+) `EX_\w+` \|.*$", text, re.M)}


def test_a_missing_socket_folder_is_made(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "deeper" / "broker.sock"
    (tmp_path / "work").mkdir()
    d = DaemonProcess(tmp_path / "work", {"socket_path": str(sock)})
    d.socket = sock  # where start() waits for it
    try:
        d.start()
        assert sock.is_socket()
    finally:
        d.kill()
    assert "made" in readme_table()[EX_CANTCREAT] or "created" in readme_table()[EX_CANTCREAT]


def test_a_socket_folder_that_cannot_be_made_exits_73(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way of the socket's folder")
    done = brokerd_once(config(tmp_path, blocker / "broker.sock"))
    assert done.returncode == EX_CANTCREAT, done.stderr
    assert str(blocker) in done.stderr and "Traceback" not in done.stderr
    assert "socket" in readme_table()[EX_CANTCREAT]


def test_every_config_error_exits_78_as_the_table_says(tmp_path: Path) -> None:
    cases: list[dict[str, dict[str, object]]] = [
        {"engine": {"kind": "subprocess"}},
        {"engine": {"kind": "openai", "api_key": "sk-…"}},
        {"queue": {"debounce_ms": -1}},
    ]
    for extra in cases:
        done = brokerd_once(config(tmp_path, tmp_path / "s.sock", **extra))
        assert done.returncode == EX_CONFIG, (extra, done.stderr)
    assert "configuration" in readme_table()[EX_CONFIG]
