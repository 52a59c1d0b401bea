"""Opening the ledger file and migrating its schema.

Every connection runs in WAL mode with foreign keys on, in autocommit mode:
transactions are opened explicitly by the writer. Migrations are numbered SQL files
applied in order, each in its own transaction together with the `user_version` bump,
so a crash leaves the schema at a whole version; a ledger newer than this code is
refused. A damaged file is refused before anything writes to it: `check` runs `PRAGMA
quick_check` (every b-tree page, not the index contents) within a time budget, and
any error SQLite reports as corruption is `LedgerDamaged`, whose message says how to
get the data back.

A ledger encrypted at rest is opened with its key, here and nowhere else, through
SQLCipher (ledger/port/cipher.py); the first read tells a wrong key, or a key given
for a plain file, from a ledger it opens, before anything is written.

Every file is opened through `open_file`, which picks the driver (ledger/port/cipher.py):
a plain ledger by the one whose SQLite has FTS5 secure-delete when there is one. Once
the index has it on (`secure_index`, at migration), only such an SQLite reads it right:
an older one is refused at open, naming the install, rather than let read a format it
does not know.

None binds through an adapter that returns it, registered once per process for every
connection; it still binds as NULL, only cheaper than the sqlite3 module's own lookup
(docs/performance.md).
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Literal
from urllib.parse import quote

from ledger.port.cipher import (
    INSTALL,
    SECURE_DELETE,
    DatabaseError,
    Error,
    Key,
    KeyFileError,
    OperationalError,
    driver,
    is_plain,
    plain_driver,
    secure_delete_in,
)
from ledger.port.errors import LedgerDamaged, LedgerError

Synchronous = Literal["NORMAL", "FULL"]
sqlite3.register_adapter(type(None), lambda none: none)  # cheaper; still NULL


SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26
RECOVERY = (
    "stop the daemon and restore the last `brokerctl backup` copy in its place "
    "(README, 'Back up the ledger'), or recover what is readable with the sqlite3 shell "
    "(sqlite3 ledger.db .recover | sqlite3 recovered.db) and put recovered.db in its place"
)
CHECK_STEPS = 10_000  # SQLite VM steps between looks at the clock (well under 1 ms)


def is_damage(exc: BaseException | None) -> bool:
    """Whether SQLite reported `exc` because the file is damaged or not a database."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return isinstance(exc, DatabaseError) and code in (SQLITE_CORRUPT, SQLITE_NOTADB)


def damaged(path: Path | str, problems: list[str]) -> LedgerDamaged:
    shown = "; ".join(p.replace("\n", " ") for p in problems[:3])
    return LedgerDamaged(f"the ledger {path} is damaged ({shown}); {RECOVERY}")


@dataclass(frozen=True, slots=True)
class Check:
    problems: list[str]  # empty: no damage found in what was checked
    finished: bool  # False: the budget ran out first, and the rest is unchecked


def quick_check(conn: sqlite3.Connection, budget_s: float | None = None) -> Check:
    """`PRAGMA quick_check`, stopped once `budget_s` has passed (None: no bound).

    The bound is a progress handler that looks at the clock every CHECK_STEPS
    VM steps and interrupts the statement past the deadline; quick_check reads
    about 0.9 GB/s from a warm cache here (0.23 s for 200 MB), so a few seconds
    cover a large ledger. An error that SQLite raises because of damage (a
    page it cannot even parse) is a problem found, not a failure of the check.
    """
    deadline = time.monotonic() + (budget_s or 0.0)
    stopped = False

    def past_deadline() -> int:
        nonlocal stopped
        stopped = time.monotonic() > deadline
        return int(stopped)

    if budget_s is not None:
        conn.set_progress_handler(past_deadline, CHECK_STEPS)
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except DatabaseError as exc:
        if stopped:
            return Check([], finished=False)
        if is_damage(exc):
            return Check([str(exc)], finished=True)
        raise
    finally:
        conn.set_progress_handler(None, 0)
    return Check([str(r[0]) for r in rows if r[0] != "ok"], finished=True)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str = "ledger.migrations") -> list[Migration]:
    """The numbered SQL files of `package` in order (each backend has its own)."""
    out = []
    for entry in resources.files(package).iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            out.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    out.sort(key=lambda m: m.version)
    for expected, migration in enumerate(out, start=1):
        if migration.version != expected:
            raise LedgerError(f"migration numbering has a gap at {migration.name}")
    return out


def readonly_uri(path: Path | str) -> str:
    """The SQLite URI that opens `path` read-only. The path is quoted: in a URI a
    '#' or '?' ends it and '%xx' is decoded, so `ledger#1.db` opened `ledger`
    (created it, even) and `x%20y.db` opened `x y.db`."""
    return f"file:{quote(str(path), safe='/')}?mode=ro"


def connect(
    path: Path | str,
    synchronous: Synchronous = "NORMAL",
    *,
    readonly: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
    key: Key | None = None,
) -> sqlite3.Connection:
    """A connection to the ledger file, set up as every connection to it is; with
    `key`, through SQLCipher, and refused (a LedgerError) unless the key opens it."""
    target, uri = (readonly_uri(path), True) if readonly else (str(path), False)
    conn = open_file(path, target, uri, key, factory, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(f"could not switch {path} to WAL mode (got {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    # A deleted row's bytes are zeroed in its page, and a freed page is zeroed, at
    # once: what is deleted (an erasure, an expiry) leaves no residue in the file.
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")
    return conn


def open_file(
    path: Path | str,
    target: str,
    uri: bool,
    key: Key | None,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
    *,
    isolation_level: Literal["DEFERRED"] | None = "DEFERRED",
) -> sqlite3.Connection:
    """A connection to the SQLite file `target` (the ledger at `path`, or a file
    beside it), through the driver that opens it: SQLCipher with `key`, else the
    plain driver. Refused (a LedgerError) when the ledger's full-text index needs a
    newer SQLite than the driver's."""
    if key is not None:
        conn = open_keyed(path, target, uri, key, factory)
        if isolation_level is not None:
            conn.isolation_level = isolation_level
        module = driver()
    else:
        module = plain_driver()
        _register(module)
        conn = module.connect(
            target,
            uri=uri,
            isolation_level=isolation_level,
            check_same_thread=False,
            factory=_class_on(module, factory),
        )
    if not secure_delete_in(module):
        try:
            refuse_older_reader(conn, path, module)
        except BaseException:
            conn.close()
            raise
    return conn


_REGISTERED: set[str] = set()


def _register(module: ModuleType) -> None:
    if module.__name__ not in _REGISTERED:
        module.register_adapter(type(None), lambda none: none)  # cheaper; still NULL
        _REGISTERED.add(module.__name__)


def _class_on(module: ModuleType, factory: type[sqlite3.Connection]) -> type[sqlite3.Connection]:
    return factory if module is sqlite3 else _cipher_class(factory)


def secure_index(conn: sqlite3.Connection) -> bool:
    """Whether the ledger's full-text index has FTS5 secure-delete on (or was written
    with it: an index format only SQLite 3.42 and later reads)."""
    try:
        row = conn.execute(
            "SELECT 1 FROM messages_fts_config WHERE (k = 'secure-delete' AND v = 1)"
            " OR (k = 'version' AND v >= 5)"
        ).fetchone()
    except OperationalError:  # no index yet (a new file, or not a ledger)
        return False
    return row is not None


def refuse_older_reader(conn: sqlite3.Connection, path: Path | str, module: ModuleType) -> None:
    """A LedgerError when the index of the ledger `conn` opened needs a newer SQLite
    than `module`'s, before anything reads it."""
    if secure_index(conn):
        need = ".".join(map(str, SECURE_DELETE))
        raise LedgerError(
            f"the ledger {path} keeps its full-text index with FTS5 secure-delete, which"
            f" needs SQLite {need} or later, and this Python's is {module.sqlite_version}:"
            f" {INSTALL} (its SQLite opens plain ledgers too)"
        )


def turn_on_secure_index(conn: sqlite3.Connection) -> bool:
    """Turn FTS5 secure-delete on for the ledger's index when the driver's SQLite has
    it (idempotent; the index's own config records it); whether it is on."""
    if secure_index(conn):
        return True
    found = str(conn.execute("SELECT sqlite_version()").fetchone()[0])
    if tuple(int(x) for x in found.split(".")) < SECURE_DELETE:
        return False
    if conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'messages_fts'").fetchone() is None:
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        # An empty index has its structure and averages rows only; one with segments
        # may hold words deleted before now, which one whole merge is to clear.
        used = conn.execute("SELECT count(*) > 2 FROM messages_fts_data").fetchone()[0]
        conn.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1)")
        if used:
            conn.execute("INSERT OR REPLACE INTO index_upkeep (id, whole_merge_due) VALUES (1, 1)")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


def open_keyed(
    path: Path | str, target: str, uri: bool, key: Key, factory: type[sqlite3.Connection]
) -> sqlite3.Connection:
    """A SQLCipher connection to `target` keyed with `key`; the first read tells a
    wrong key (or a plain file given a key) from a ledger it opens."""
    try:
        cipher = driver()
    except KeyFileError as exc:
        raise LedgerError(str(exc)) from exc
    _register(cipher)
    conn: sqlite3.Connection = cipher.connect(
        target,
        uri=uri,
        isolation_level=None,
        check_same_thread=False,
        factory=_cipher_class(factory),
    )
    try:
        conn.execute("PRAGMA cipher_log_level = NONE")  # a wrong key is our error to tell
        conn.execute(f"PRAGMA key = {key.pragma_value()}")
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    except DatabaseError as exc:
        conn.close()
        if is_plain(path):
            raise LedgerError(
                f"the ledger {path} is not encrypted, but a key was given: encrypt it"
                " first (brokerctl encrypt --key-file FILE), or open it without a key"
            ) from exc
        raise LedgerError(
            f"the key does not open the ledger {path}: a wrong key (or a file that is"
            f" not a ledger: {exc})"
        ) from exc
    return conn


_CIPHER_CLASSES: dict[str, type[sqlite3.Connection]] = {}


def _cipher_class(factory: type[sqlite3.Connection]) -> type[sqlite3.Connection]:
    """`factory` rebuilt on SQLCipher's connection class: a subclass of
    `sqlite3.Connection` whose own behaviour lives in mixins before it."""
    base: type[sqlite3.Connection] = driver().Connection
    if factory is sqlite3.Connection:
        return base
    name = f"{factory.__module__}.{factory.__qualname__}"
    if name not in _CIPHER_CLASSES:
        bases = tuple(base if b is sqlite3.Connection else b for b in factory.__bases__)
        assert base in bases, f"{name} must name sqlite3.Connection as a direct base"
        _CIPHER_CLASSES[name] = type(factory.__name__, bases, {"__module__": factory.__module__})
    return _CIPHER_CLASSES[name]


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied."""
    migrations = load_migrations()
    current = schema_version(conn)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise LedgerError(
            f"ledger schema version {current} is newer than this broker knows ({latest}); "
            "refusing to touch it"
        )
    applied = []
    for migration in migrations[current:]:
        # executescript commits first, so wrap the whole file and the version
        # bump in one explicit transaction.
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{migration.sql}\n"
                f"PRAGMA user_version = {migration.version};\nCOMMIT;"
            )
        except Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(f"{migration.version:04d}_{migration.name}")
    turn_on_secure_index(conn)
    return applied


def integrity_check(conn: sqlite3.Connection) -> list[str]:
    return quick_check(conn).problems
