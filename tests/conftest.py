"""Shared fixtures: a real daemon on a temporary socket and ledger."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from tests import cluster, harness, prefork, temporal_runtime
from tests.harness import DaemonProcess

if TYPE_CHECKING:
    from broker.runtime.temporal.devserver import DevServer

DaemonFactory = Callable[..., DaemonProcess]
pytest_plugins = ["tests.watchdog", "tests.leftovers"]

# No per-example deadline, on top of whichever profile hypothesis chose (its "ci"
# profile on a CI machine has none either): the suite runs on shared 2-core
# machines where a pause of the whole VM is not a bug, and a deadline missed once
# and not again fails a run as "unreliable timings". Speed is measured by bench/.
settings.register_profile("broker", parent=settings.default, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "broker"))


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    """One Temporal dev server for the whole test session (its state in a temporary
    directory). Tests that kill it restart it on the same port and file."""
    import tempfile

    from broker.runtime.temporal.devserver import DevServer

    work = Path(tempfile.mkdtemp(prefix="tmprl-", dir="/tmp"))
    server = DevServer(work).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ledger_template() -> Iterator[Path]:
    """An SQLite ledger migrated once per test process, to copy where a test needs a
    fresh migrated one; the migrations' own tests migrate for real."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="brk-template-", dir="/tmp") as name:
        yield harness.migrated_template(Path(name))


@pytest.fixture(scope="session", autouse=True)
def _daemons_copy_the_template(ledger_template: Path) -> Iterator[None]:
    """Each daemon of the run starts on a copy of `ledger_template` (tests/harness.py)."""
    harness.use_template(ledger_template)
    yield
    harness.use_template(None)


@pytest.fixture(scope="session", autouse=True)
def _daemons_are_forked() -> Iterator[None]:
    """Each daemon of the run is forked from one process of this test process that
    has its imports done (tests/prefork.py). `TEST_DAEMON_EXEC=1` starts each in an
    interpreter of its own, as a real start does."""
    if os.environ.get("TEST_DAEMON_EXEC") == "1" or not prefork.available():
        yield
        return
    server = prefork.Server()
    harness.use_forks(server)
    yield
    harness.use_forks(None)
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _runtime_switch(request: pytest.FixtureRequest) -> Iterator[None]:
    """`TEST_RUNTIME=temporal`: every daemon of the run on the Temporal runtime."""
    if not temporal_runtime.wanted():
        yield
        return
    server: DevServer = request.getfixturevalue("temporal_server")
    temporal_runtime.set_address(server.address)
    yield
    temporal_runtime.set_address(None)


# The modules that run longest, longest first. scripts/test hands whole modules to
# its workers in collection order (`--dist loadfile --no-loadscope-reorder`): these
# start first, so that none is left running alone at the end of a parallel run.
LONGEST_FIRST = (
    "tests/unit/test_pg_unicode_words.py",
    "tests/conformance/test_port_differential.py",
    "tests/integration/postgres/test_replies.py",
    "tests/integration/test_framework_engines.py",
    "tests/realservers/test_matrix.py",
    "tests/integration/test_erasure.py",
    "tests/integration/test_mcp_tools.py",
    "tests/integration/test_threads.py",
    "tests/integration/test_console.py",
    "tests/integration/test_temporal.py",
    "tests/library/test_session_models.py",
    "tests/library/test_store_model.py",
    "tests/integration/test_shutdown.py",
    "tests/integration/test_encryption.py",
    "tests/integration/test_crash_ingest.py",
    "tests/realservers/test_mail.py",
    "tests/conformance/test_turns.py",
    "tests/unit/test_writer_process.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of LONGEST_FIRST first, then the others by their number of tests,
    most first (what xdist's own reordering would do); the order within a module is
    kept. Under `TEST_CLUSTER=2` every test is of the two-node configuration."""
    module = {item: item.nodeid.split("::")[0] for item in items}
    sizes = Counter(module.values())
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(module[item], len(rank)), -sizes[module[item]]))
    if cluster.wanted():
        for item in items:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session", autouse=True)
def _cluster_switch(request: pytest.FixtureRequest) -> Iterator[None]:
    """`TEST_CLUSTER=2`: every daemon of the run a pair of nodes (tests/cluster.py)."""
    if not cluster.wanted():
        yield
        return
    cluster.configure(
        request.getfixturevalue("pg_template"),
        request.getfixturevalue("temporal_server").address,
    )
    yield
    cluster.configure(None, None)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes; pytest's tmp paths can be long.
    # Removed afterwards: pytest's own tmp dirs are pruned for us, these are not.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="brk-", dir="/tmp", ignore_cleanup_errors=True) as name:
        yield Path(name)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[tuple[Any, str]]:
    """A private PostgreSQL cluster for this test session and the name of a database
    migrated to the ledger's schema, to copy per test (ledger/postgres/devcluster.py).
    A machine without PostgreSQL fails here, naming what is missing."""
    # Imported here: a machine without psycopg still runs everything else.
    from ledger.postgres import devcluster

    cluster = devcluster.create(durable=False)
    try:
        yield cluster, devcluster.template_database(cluster)
    finally:
        cluster.destroy()


@pytest.fixture
def daemon_ledger() -> Callable[[str], dict[str, Any]]:
    """The `[ledger]` settings of each daemon a test starts, by its name: none here
    (SQLite in the daemon's directory); tests/integration/postgres overrides it."""
    return lambda name: {}


@pytest.fixture
def make_daemon(
    short_tmp: Path, daemon_ledger: Callable[[str], dict[str, Any]]
) -> Iterator[DaemonFactory]:
    """Start daemons with extra config; all are stopped at the end of the test."""
    started: list[DaemonProcess] = []

    def factory(
        config: dict[str, Any] | None = None, backend: str = "asyncio", name: str = "d"
    ) -> DaemonProcess:
        work = short_tmp / name
        work.mkdir(exist_ok=True)
        ledger = daemon_ledger(name)
        if ledger:
            config = {**(config or {})}
            config["ledger"] = {**config.get("ledger", {}), **ledger}
        daemon = DaemonProcess(work, config, backend=backend).start()
        started.append(daemon)
        return daemon

    yield factory
    for daemon in started:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()


@pytest.fixture
def daemon(make_daemon: DaemonFactory) -> DaemonProcess:
    return make_daemon()


@pytest.fixture(params=["asyncio", "trio"])
def any_backend_daemon(request: pytest.FixtureRequest, make_daemon: DaemonFactory) -> DaemonProcess:
    """The same daemon under asyncio (uvloop) and under trio."""
    return make_daemon(backend=request.param)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
