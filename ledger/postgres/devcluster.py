"""A private PostgreSQL cluster for tests and local demos (`scripts/cluster`).

The cluster lives in a directory of its own and listens only on a Unix socket there
(no TCP port to collide on), with `trust` authentication: nothing outside the
machine's own users can reach it. initdb and the server refuse to run as root, so
when we are root they run as an unprivileged user (`nobody` unless told otherwise),
which owns the directory. A machine without PostgreSQL's binaries gets
`ClusterUnavailable` naming what is missing and how to install it; nothing is
skipped. `durable=False` (tests only) turns fsync off: a test cluster never outlives
a power cut, and a commit still reaches the kernel before it returns, so a crash of
the server alone (`stop("immediate")`) loses nothing committed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

BIN_DIRS = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/local/bin",
    "/usr/bin",
)
SUPERUSER = "postgres"
INSTALL_HINT = (
    "install PostgreSQL (apt-get install postgresql-15, or run scripts/setup dev as root)"
)
START_TIMEOUT_S = 30


class ClusterUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says what is missing."""


def find_bin_dir() -> Path:
    for directory in BIN_DIRS:
        if all(os.access(Path(directory, tool), os.X_OK) for tool in ("initdb", "pg_ctl")):
            return Path(directory)
    raise ClusterUnavailable(
        f"PostgreSQL's initdb and pg_ctl are not in any of {', '.join(BIN_DIRS)}: {INSTALL_HINT}"
    )


@dataclass
class DevCluster:
    root: Path  # holds data/ and the socket; removed by `destroy`
    bin_dir: Path
    run_as: str | None  # the user initdb and the server run as

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is not None:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S * 2, check=False
        )
        if check and done.returncode != 0:
            raise ClusterUnavailable(
                f"{args[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}"
            )
        return done

    def start(self) -> None:
        self._run(
            "pg_ctl", "start", "-w", "-t", str(START_TIMEOUT_S), "-D", str(self.data),
            "-l", str(self.root / "server.log"), "-o", self._server_options,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """`mode="immediate"` is a crash: the server exits without a checkpoint."""
        self._run("pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.data), check=False)

    def running(self) -> bool:
        return self._run("pg_ctl", "status", "-D", str(self.data), check=False).returncode == 0

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    _server_options = ""


def create(
    *,
    durable: bool = True,
    parent: str | None = None,
    run_as: str = "nobody",
    settings: dict[str, str] | None = None,
) -> DevCluster:
    """initdb a fresh cluster in a new directory under `parent` and start it, with
    the server `settings` given (tests use them to make a failure happen)."""
    bin_dir = find_bin_dir()
    user = run_as if os.geteuid() == 0 else None
    if user is not None:
        try:
            owner = pwd.getpwnam(user)
        except KeyError:
            raise ClusterUnavailable(f"no user {user!r} to run PostgreSQL as") from None
    root = Path(tempfile.mkdtemp(prefix="broker-pg-", dir=parent))
    root.chmod(0o755)  # the server's user must reach its data and socket
    cluster = DevCluster(root, bin_dir, user)
    if user is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    try:
        cluster._run(
            "initdb", "-D", str(cluster.data), "-U", SUPERUSER, "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        options = [
            f"-k {root}",
            "-c listen_addresses=''",
            "-c max_connections=200",
            "-c shared_buffers=32MB",
        ]
        if not durable:
            # Not synchronous_commit=off: a COMMIT must have reached the kernel before it
            # returns, or a crash of the server (pg_ctl stop -m immediate) loses it.
            options += ["-c fsync=off", "-c full_page_writes=off"]
        options += [f"-c {name}={value}" for name, value in (settings or {}).items()]
        cluster._server_options = " ".join(options)
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster


def template_database(cluster: DevCluster, name: str = "ledger_template") -> str:
    """A database migrated to the ledger's schema, to copy per test (`fresh_database`)."""
    import psycopg

    from ledger.postgres.connection import PgConnection
    from ledger.postgres.schema import migrate

    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    conn = PgConnection(cluster.dsn(name))
    try:
        migrate(conn)
    finally:
        conn.close()
    return name


def fresh_database(cluster: DevCluster, name: str, template: str | None = None) -> str:
    """Create the empty database `name` (a copy of `template` when given); its DSN."""
    import psycopg

    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"{copy}')
    return cluster.dsn(name)


def empty_database(dsn: str) -> None:
    """Delete every row of the ledger database at `dsn` and number its keys from 1
    again: a fresh ledger for the next test, in a few milliseconds where CREATE
    DATABASE or TRUNCATE take hundreds (each makes new files for every table).
    Foreign keys are not checked meanwhile (`session_replication_role`), so the
    order of the tables does not matter."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename != 'ledger_schema'"
        ).fetchall()
        for (table,) in tables:
            conn.execute(f'DELETE FROM "{table}"')
        sequences = conn.execute(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
        ).fetchall()
        for (sequence,) in sequences:
            conn.execute(f"SELECT setval('\"{sequence}\"', 1, false)")
