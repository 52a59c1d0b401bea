"""Session-scoped real servers and the adapter process, for tests/realservers.

Every test here is marked `realserver`. A server that cannot be started
(not installed) fails the test with a message naming the package.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.realservers.processes import AdapterProcess
from tests.realservers.servers import Server, start_ngircd, start_prosody, start_synapse

XMPP_ACCOUNTS = {"bot": "bot-secret", "ann": "ann-secret", "bob": "bob-secret"}
MATRIX_ACCOUNTS = {
    "bot": "bot-secret",
    "ann": "ann-secret",
    "bob": "bob-secret",
    "ratebot": "ratebot-secret",
    "admin": "admin-secret",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realservers/" in str(item.path):
            item.add_marker(pytest.mark.realserver)


@pytest.fixture
def adapters() -> Iterator[list[AdapterProcess]]:
    started: list[AdapterProcess] = []
    yield started
    for proc in started:
        proc.kill()


@pytest.fixture(scope="session")
def ngircd() -> Iterator[Server]:
    with start_ngircd() as server:
        yield server


@pytest.fixture(scope="session")
def ngircd_tls() -> Iterator[Server]:
    with start_ngircd(tls=True) as server:
        yield server


@pytest.fixture(scope="session")
def prosody() -> Iterator[Server]:
    with start_prosody(XMPP_ACCOUNTS) as server:
        yield server


# A second Prosody that rate-limits every client stream (mod_limits, read side)
# and bounces marked messages from the bot with stanza errors (mod_test_bounce).
LIMITED_PROSODY = """\
limits = { c2s = { rate = "2kb/s"; burst = "1s" } }
bounce_from = "bot"
"""


@pytest.fixture(scope="session")
def prosody_limited() -> Iterator[Server]:
    modules = ("limits", "test_bounce")
    with start_prosody(XMPP_ACCOUNTS, modules, LIMITED_PROSODY) as server:
        yield server


@pytest.fixture(scope="session")
def synapse() -> Iterator[Server]:
    with start_synapse(MATRIX_ACCOUNTS, admins=("admin",)) as server:
        yield server
