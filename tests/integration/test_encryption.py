"""Encryption at rest through the real daemon (its writer process, its checkpointer,
its readers), on asyncio and trio: a marker written through it is in none of the raw
files (the ledger, its WAL, a `brokerctl backup` copy), while the same search finds it
in a plain ledger; and the refusals at start (exit 65 for a wrong key or a key for a
plain ledger, exit 78 for a bad key file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess, brokerd_once, write_config
from tests.integration.test_identity import adapter, inbound, op, operator, say, uniq

pytest.importorskip("sqlcipher3", reason="the encryption extra (scripts/test installs it)")
pytestmark = pytest.mark.anyio

HEX = "00112233445566778899aabbccddeeff" * 2
EX_DATAERR, EX_CONFIG = 65, 78


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the client's loop; the daemon's is the parameter below


def key_file(directory: Path, text: str = HEX, mode: int = 0o600) -> Path:
    path = directory / "ledger.key"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def raw_files(ledger: Path) -> dict[str, bytes]:
    """The ledger and every file beside it that SQLite keeps (-wal, -shm)."""
    return {p.name: p.read_bytes() for p in sorted(ledger.parent.glob(ledger.name + "*"))}


def backup(d: DaemonProcess, target: Path) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), "backup", str(target))


async def write_marker(d: DaemonProcess) -> str:
    """A unique marker in three messages through the daemon; found again by search."""
    channel, marker = uniq("c"), uniq("zqxenc")
    async with await adapter(d, channel) as a, await operator(d) as o:
        for n in range(3):
            await say(a, inbound(uniq("m"), "carol", text=f"carol {n} says {marker}"))
        hits = await op(o, "recall.search", query=marker)
        assert hits, "the daemon did not keep the marker"
    return marker


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_marker_through_an_encrypted_daemon_is_in_no_raw_file(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    key = key_file(short_tmp)
    d = make_daemon({"ledger": {"key_file": str(key)}}, backend=backend, name="enc")
    marker = (await write_marker(d)).encode()
    copy = short_tmp / "backup.db"
    done = backup(d, copy)
    assert done.returncode == 0, done.stderr
    while_running = raw_files(d.ledger)
    assert f"{d.ledger.name}-wal" in while_running  # the WAL was searched too
    d.terminate()
    after = raw_files(d.ledger)
    for name, data in [*while_running.items(), *after.items(), ("backup", copy.read_bytes())]:
        assert marker not in data, f"{name} holds the marker in plain"
        assert not data.startswith(b"SQLite format 3"), f"{name} is a plain SQLite file"

    plain = make_daemon(backend=backend, name="plain")  # the same search finds it here
    marker = (await write_marker(plain)).encode()
    assert any(marker in data for data in raw_files(plain.ledger).values())
    copy = short_tmp / "plain-backup.db"
    assert backup(plain, copy).returncode == 0
    assert marker in copy.read_bytes()


def test_a_wrong_key_or_a_key_for_a_plain_ledger_exits_65_saying_which(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    key = key_file(short_tmp)
    d = make_daemon({"ledger": {"key_file": str(key)}}, name="enc")
    d.terminate()
    before = raw_files(d.ledger)
    key.write_text("another passphrase, long enough\n")
    done = brokerd_once(d.config_path)
    assert done.returncode == EX_DATAERR, done.stderr
    assert "the key does not open the ledger" in done.stderr and "wrong key" in done.stderr
    assert raw_files(d.ledger) == before, "a refused start must not touch the files"
    del d.config["ledger"]["key_file"]  # and no key at all: it says what may be the cause
    write_config(d.config_path, d.config)
    done = brokerd_once(d.config_path)
    assert done.returncode == EX_DATAERR, done.stderr
    assert "if it is an encrypted ledger, set [ledger] key_file" in done.stderr
    assert raw_files(d.ledger) == before

    plain = make_daemon(name="plain")
    plain.terminate()
    plain.config["ledger"]["key_file"] = str(key)
    write_config(plain.config_path, plain.config)
    done = brokerd_once(plain.config_path)
    assert done.returncode == EX_DATAERR, done.stderr
    assert "is not encrypted, but a key was given" in done.stderr
    assert "brokerctl encrypt" in done.stderr


@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [("", 0o600, "is empty"), (HEX, 0o644, "mode 0644"), ("short", 0o600, "at least 16")],
)
def test_a_bad_key_file_exits_78_naming_it(
    make_daemon: DaemonFactory, short_tmp: Path, text: str, mode: int, says: str
) -> None:
    d = make_daemon(name="plain")
    d.terminate()
    key = key_file(short_tmp, text, mode)
    d.config["ledger"]["key_file"] = str(key)
    write_config(d.config_path, d.config)
    done = brokerd_once(d.config_path)
    assert done.returncode == EX_CONFIG, done.stderr
    assert str(key) in done.stderr and says in done.stderr


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), *args)


def every_file(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


async def test_encrypt_in_place_keeps_no_plain_copy_and_rekey_changes_the_key(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    keys = short_tmp / "keys"
    keys.mkdir()
    first = key_file(keys)
    d = make_daemon(name="d")
    marker = (await write_marker(d)).encode()
    refused = ctl(d, "encrypt", "--key-file", str(first))
    assert refused.returncode == 69 and "stop the daemon first" in refused.stderr
    assert d.ledger.read_bytes().startswith(b"SQLite format 3")  # untouched
    d.terminate()
    assert any(marker in data for data in every_file(d.ledger.parent).values())

    done = ctl(d, "encrypt", "--key-file", str(first))
    assert done.returncode == 0, done.stderr
    assert f"now set [ledger] key_file = '{first}'" in done.stdout  # the section named, unwrapped
    found = [name for name, data in every_file(short_tmp).items() if marker in data]
    assert found == [], f"plain copies remain: {found}"
    again = ctl(d, "encrypt", "--key-file", str(first))
    assert again.returncode == EX_DATAERR and "not a plain SQLite file" in again.stderr

    d.config["ledger"]["key_file"] = str(first)
    write_config(d.config_path, d.config)
    d.start()
    async with await operator(d) as o:
        assert await op(o, "recall.search", query=marker.decode())  # all still there
    d.terminate()

    second = keys / "second.key"
    second.write_text("a new passphrase for the ledger\n")
    second.chmod(0o400)
    done = ctl(d, "rekey", "--key-file", str(first), "--new-key-file", str(second))
    assert done.returncode == 0, done.stderr
    assert f"now set [ledger] key_file = '{second}'" in done.stdout
    done = brokerd_once(d.config_path)  # the config still names the old key
    assert done.returncode == EX_DATAERR and "the key does not open" in done.stderr
    d.config["ledger"]["key_file"] = str(second)
    write_config(d.config_path, d.config)
    d.start()
    async with await operator(d) as o:
        assert await op(o, "recall.search", query=marker.decode())
    d.terminate()
    assert not any(marker in data for data in every_file(short_tmp).values())


async def test_an_erasure_on_an_encrypted_ledger_truncates_its_wal_with_the_key(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    key = key_file(short_tmp)
    d = make_daemon({"ledger": {"key_file": str(key)}}, name="enc")
    channel, marker = uniq("c"), uniq("zqxerase")
    async with await adapter(d, channel) as a, await operator(d) as o:
        await say(a, inbound(uniq("m"), "erin", text=f"erin says {marker}"))
        erin = (await op(o, "contact.show", channel=channel, sender_id="erin"))["entity"]
        counts = await op(o, "entity.erase", entity=erin, confirm=erin)
        assert counts["entity"] == erin and counts["messages"] >= 1
        assert await op(o, "recall.search", query=marker) == []
        # The op returns after its WAL truncation, a connection of its own that
        # opens only with the key; the daemon goes on serving.
        assert await op(o, "recall.search", query="erin") == []
    assert d.proc is not None and d.proc.poll() is None
