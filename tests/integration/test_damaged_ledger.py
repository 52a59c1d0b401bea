"""A damaged or unusable ledger: the daemon refuses to start, doctor reports it.

Each ledger is damaged for real on disk (cut short, header overwritten,
garbage in a page of an index b-tree, made immutable, a schema from the
future). The daemon must exit with its sysexits code and one line,
`brokerd: cannot start: <reason>`, never a traceback, and the reason must name
the way back for damage. `brokerctl doctor` must report the same ledger as a
failing finding and exit 1, again without a traceback.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.test_doctor import doctor

EX_DATAERR, EX_UNAVAILABLE, EX_CANTCREAT, EX_NOPERM = 65, 69, 73, 77
PAGE = 4096


def ledger_with_data(make_daemon: DaemonFactory) -> DaemonProcess:
    """A stopped daemon whose ledger holds a few hundred sessions, checkpointed."""
    d = make_daemon()
    d.terminate()
    with sqlite3.connect(d.ledger) as db:  # rows enough for indexes of several pages
        db.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " VALUES ('dm:ent_x', 'dm', 'inbound', 0, 0)"
        )
        db.executemany(
            "INSERT INTO queue_items (id, session_label, source, status, reason,"
            " created_at, updated_at) VALUES (?, 'dm:ent_x', 'person', 'dropped', 'cap', 0, 0)",
            [(f"item_{n:05d}_{'x' * 60}",) for n in range(600)],
        )
    with sqlite3.connect(d.ledger) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return d


def truncate(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def damage_header(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.write(b"not a database!!")  # the 16-byte magic string


def damage_index_page(path: Path) -> None:
    """Garbage over a leaf page of the largest index b-tree (found with dbstat)."""
    with sqlite3.connect(path) as db:
        name, page = db.execute(
            "SELECT s.name, max(s.pageno) FROM dbstat s JOIN sqlite_master m ON m.name = s.name"
            " WHERE m.type = 'index' AND s.pagetype = 'leaf'"
            " GROUP BY s.name ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        assert db.execute("SELECT count(*) FROM dbstat WHERE name = ?", (name,)).fetchone()[0] > 1
    with path.open("r+b") as fh:
        fh.seek((page - 1) * PAGE)
        fh.write(bytes(range(256)) * (PAGE // 256))


def newer_schema(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 999")
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # into the file itself


DAMAGE: dict[str, tuple[Callable[[Path], None], int, str]] = {
    # name: (how, the daemon's exit status, a word of its reason)
    "truncated": (truncate, EX_DATAERR, "malformed"),
    "header": (damage_header, EX_DATAERR, "not a database"),
    "index_page": (damage_index_page, EX_DATAERR, "damaged"),
    "newer_schema": (newer_schema, EX_DATAERR, "newer"),
}


def assert_refused(done: subprocess.CompletedProcess[str], code: int, word: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("brokerd:")]
    assert len(lines) == 1 and lines[0].startswith("brokerd: cannot start: "), done.stderr
    assert word in lines[0], lines[0]


def assert_doctor_fails_on_the_ledger(d: DaemonProcess) -> None:
    code, findings = doctor(d.config_path)
    assert code == 1
    failed = {f["check"] for f in findings if f["level"] == "fail"}
    assert failed & {"ledger", "migrations"}, findings


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_ledger_is_refused_at_start_and_reported_by_doctor(
    make_daemon: DaemonFactory, kind: str
) -> None:
    d = ledger_with_data(make_daemon)
    damage, code, word = DAMAGE[kind]
    damage(d.ledger)
    before = d.ledger.read_bytes()
    done = brokerd_once(d.config_path)
    assert_refused(done, code, word)
    if code == EX_DATAERR and kind != "newer_schema":
        assert "brokerctl backup" in done.stderr and ".recover" in done.stderr
    assert d.ledger.read_bytes() == before, "a refused start must not touch the file"
    if kind in ("truncated", "header"):  # not even the item count can be read
        _, findings = doctor(d.config_path)
        stuck = [f for f in findings if f["check"] == "stuck_items"]
        assert [f["level"] for f in stuck] == ["warn"], stuck  # never "no item waits"
    assert_doctor_fails_on_the_ledger(d)


@pytest.fixture
def immutable(short_tmp: Path) -> Iterator[Callable[[Path], None]]:
    made: list[Path] = []

    def make(path: Path) -> None:
        if shutil.which("chattr") is None:
            pytest.skip("chattr is not installed")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a file immutable here: {done.stderr.strip()}")
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_immutable_ledger_is_refused_at_start(
    make_daemon: DaemonFactory, immutable: Callable[[Path], None]
) -> None:
    d = ledger_with_data(make_daemon)
    immutable(d.ledger)
    done = brokerd_once(d.config_path)
    assert_refused(done, EX_NOPERM, str(d.ledger))


PY_3_11_2 = Path("/usr/bin/python3.11")


def site_packages() -> str:
    import site

    return site.getsitepackages()[0]


@pytest.mark.parametrize("python", ["venv", "debian-3.11.2"])
def test_startup_failures_print_one_line_on_every_python(
    make_daemon: DaemonFactory, python: str
) -> None:
    """Python 3.11.0-3.11.3 wrap an exception raised in `except*`: the message must
    not depend on that."""
    if python == "venv":
        argv, env = [sys.executable], dict(os.environ)
    else:
        if not PY_3_11_2.exists():
            pytest.skip(f"{PY_3_11_2} is not installed")
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, site_packages()])}
        argv = [str(PY_3_11_2)]
    d = ledger_with_data(make_daemon)
    damage_header(d.ledger)
    done = subprocess.run(
        [*argv, "-m", "broker", "--config", str(d.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert_refused(done, EX_DATAERR, "not a database")


def test_a_second_daemon_on_the_same_socket_is_refused(daemon: DaemonProcess) -> None:
    done = brokerd_once(daemon.config_path)
    assert_refused(done, EX_UNAVAILABLE, str(daemon.socket))


def test_a_ledger_directory_that_cannot_be_made_is_refused(short_tmp: Path) -> None:
    blocker = short_tmp / "a-file"
    blocker.write_text("in the way of the ledger's directory")
    config = short_tmp / "broker.toml"
    write_config(
        config,
        {"socket_path": str(short_tmp / "s.sock"), "ledger": {"path": str(blocker / "l.db")}},
    )
    done = brokerd_once(config)
    assert_refused(done, EX_CANTCREAT, str(blocker))


def test_damage_that_crash_recovery_meets_is_refused_too(make_daemon: DaemonFactory) -> None:
    """With the check at start turned off, crash recovery is the first to read the
    damaged pages (the index of open items): the same refusal, not a traceback."""
    d = make_daemon({"ledger": {"check_s": 0}})
    d.terminate()
    with sqlite3.connect(d.ledger) as db:  # turns cut off by a crash: items left running
        db.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " VALUES ('dm:ent_x', 'dm', 'inbound', 0, 0)"
        )
        db.executemany(
            "INSERT INTO queue_items (id, session_label, source, status, payload,"
            " created_at, updated_at) VALUES (?, 'dm:ent_x', 'operator', 'running', 'x', 0, 0)",
            [(f"item_{n:05d}_{'x' * 60}",) for n in range(400)],
        )
    with sqlite3.connect(d.ledger) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = 'queue_items_open' AND pagetype = 'leaf'"
        ).fetchone()[0]
    with d.ledger.open("r+b") as fh:
        fh.seek((page - 1) * PAGE)
        fh.write(bytes(range(256)) * (PAGE // 256))
    done = brokerd_once(d.config_path)
    assert_refused(done, EX_DATAERR, "malformed")
    assert "brokerctl backup" in done.stderr and ".recover" in done.stderr
