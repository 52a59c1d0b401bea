"""Opening a ledger with the library Store: every bad file is refused with an
error naming the problem and left as it was; a ledger another process writes
(a daemon, another program's Store) is refused with its owner named."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledger.api import (
    LedgerError,
    LedgerInUse,
    LedgerNotWritable,
    NotALedger,
    SchemaTooNew,
    SyncStore,
)
from ledger.api.owner import claim, lock_path
from ledger.db import load_migrations
from tests import ledger_db
from tests.harness import DaemonProcess


def fingerprint(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"directory .*nowhere does not exist"):
        SyncStore.open(tmp_path / "nowhere" / "ledger.db")
    assert not (tmp_path / "nowhere").exists()


def test_a_directory_is_not_a_ledger_file(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="is a directory"):
        SyncStore.open(tmp_path)


def test_a_text_file_is_not_a_ledger_and_is_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n" * 100)
    before = fingerprint(path)
    with pytest.raises(NotALedger, match="not an SQLite database"):
        SyncStore.open(path)
    assert fingerprint(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_another_programs_database_is_not_a_ledger_and_is_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with ledger_db.connect(path) as conn:
        conn.execute("CREATE TABLE agent_messages (id INTEGER PRIMARY KEY, data TEXT)")
    before = fingerprint(path)
    with pytest.raises(NotALedger, match=r"not a ledger.*agent_messages"):
        SyncStore.open(path)
    assert fingerprint(path) == before
    with ledger_db.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_newer_schema_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SyncStore.open(path).close()
    newer = len(load_migrations()) + 1
    with ledger_db.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    before = fingerprint(path)
    with pytest.raises(SchemaTooNew, match=f"schema version {newer}, newer"):
        SyncStore.open(path)
    assert fingerprint(path) == before


def test_a_read_only_file_is_refused_and_untouched(short_tmp: Path) -> None:
    path = short_tmp / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("s", ["x"])
    path.chmod(0o444)
    before = fingerprint(path)
    if os.geteuid() != 0:
        with pytest.raises(LedgerNotWritable, match="not writable by uid"):
            SyncStore.open(path)
    else:  # root writes any file: ask as nobody, who may read it but not write it
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop to another user")
        short_tmp.chmod(0o755)
        probe = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                f"from ledger.api import SyncStore; SyncStore.open({str(path)!r})",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[2],
        )
        assert "LedgerNotWritable" in probe.stderr and "not writable by uid 65534" in probe.stderr
    assert fingerprint(path) == before


def test_a_ledger_a_daemon_serves_names_its_socket(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    SyncStore.open(path).close()
    with claim(path, socket="/run/broker.sock"):
        with pytest.raises(LedgerInUse, match=r"daemon .* socket /run/broker\.sock") as refused:
            SyncStore.open(path)
        assert refused.value.socket == "/run/broker.sock"
    SyncStore.open(path).close()  # free again once the daemon let go


def test_a_store_in_another_process_holds_the_ledger_until_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys
                from ledger.api import SyncStore
                store = SyncStore.open({str(path)!r})
                print("open", flush=True)
                sys.stdin.read()
            """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(LedgerInUse, match=f"pid {holder.pid}"):
            SyncStore.open(path)
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdin.close()  # type: ignore[union-attr]
        holder.stdout.close()  # type: ignore[union-attr]
    assert lock_path(path).exists()  # a stale lock file does not block: the flock died
    SyncStore.open(path).close()


def test_the_ledger_of_a_running_daemon_is_refused_naming_its_socket(
    daemon: DaemonProcess,
) -> None:
    with pytest.raises(LedgerInUse, match=re.escape(str(daemon.socket))) as refused:
        SyncStore.open(daemon.ledger)
    assert refused.value.socket == str(daemon.socket)
    daemon.kill()  # kill -9: the kernel drops the daemon's claim with it
    with SyncStore.open(daemon.ledger) as store:
        assert store.list_sessions().sessions == []


@pytest.mark.parametrize("name", ["ledger#1.db", "what?.db", "x%20y.db", "a b ü.db"])
def test_a_path_with_uri_characters_reads_that_file_and_no_other(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with SyncStore.open(path) as store:
        store.append("s", ["x"])
        assert store.items("s") == ["x"]
    with SyncStore.open(path) as store:
        assert store.items("s") == ["x"]
    # The read connections opened `ledger`, `what` or `x y.db` (an SQLite URI's
    # '#', '?' and '%20'), made them if missing and read no sessions there.
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, f"{name}.lock"]


def test_a_database_with_tables_named_like_a_ledgers_is_untouched(tmp_path: Path) -> None:
    # Another program's chat database: sessions, turns and messages of its own.
    path = tmp_path / "chat.db"
    with ledger_db.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE sessions (id TEXT); CREATE TABLE turns (id TEXT);"
            " CREATE TABLE messages (id TEXT, body TEXT);"
        )
    conn.close()
    before = fingerprint(path)
    with pytest.raises(NotALedger, match=r"not a ledger.*messages"):
        SyncStore.open(path)
    assert fingerprint(path) == before
    with ledger_db.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


@pytest.mark.parametrize("setting", ["OFF", "bogus", "normal"])
def test_a_synchronous_setting_other_than_normal_or_full_is_refused(
    tmp_path: Path, setting: str
) -> None:
    # SQLite takes OFF (an acked append lost in a power cut) and ignores the rest.
    with pytest.raises(ValueError, match=f"synchronous={setting!r}.*'NORMAL' or 'FULL'"):
        SyncStore.open(tmp_path / "ledger.db", synchronous=setting)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
