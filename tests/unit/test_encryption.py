"""Encryption at rest below the daemon: the key file's checks, `[ledger] key_file` in
the config, connections opened with a key (a wrong key, a key for a plain file), the
ledger with its writer thread or process, a backup, and the library's Store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.config import ConfigError, load_settings
from ledger.db import connect, migrate
from ledger.port.cipher import DatabaseError, Key, KeyFileError, read_key
from ledger.port.errors import LedgerError
from ledger.sqlite.store import Ledger
from ledger.transfer import backup

pytest.importorskip("sqlcipher3", reason="the encryption extra (scripts/test installs it)")

HEX = "0123456789abcdef" * 4
MARKER = b"zqx-secret-marker-7731"


def key_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "ledger.key") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def write_marker(path: Path, key: Key | None) -> None:
    conn = connect(path, key=key)
    try:
        migrate(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES (?)", (MARKER.decode(),))
    finally:
        conn.close()


# -- the key file --------------------------------------------------------------


def test_a_raw_key_and_a_passphrase_are_read(tmp_path: Path) -> None:
    raw_key = read_key(key_file(tmp_path, HEX + "\n"))
    assert raw_key.raw and raw_key.pragma_value() == f"\"x'{HEX}'\""
    phrase = read_key(key_file(tmp_path, "it's a long passphrase", 0o400, "p.key"))
    assert not phrase.raw and phrase.pragma_value() == "'it''s a long passphrase'"
    assert HEX not in repr(raw_key) and "passphrase" not in repr(phrase)


@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [
        ("", 0o600, "is empty"),
        ("\n", 0o600, "is empty"),
        ("short phrase", 0o600, "at least 16 characters"),
        (HEX, 0o644, "mode 0644"),
        (HEX, 0o640, "mode 0640"),
        (HEX, 0o700, "mode 0700"),
    ],
)
def test_a_bad_key_file_is_refused_naming_it(
    tmp_path: Path, text: str, mode: int, says: str
) -> None:
    path = key_file(tmp_path, text, mode)
    with pytest.raises(KeyFileError, match=says) as refused:
        read_key(path)
    assert str(path) in str(refused.value)


def test_a_missing_key_file_or_another_owners_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"cannot read key file .*nope\.key"):
        read_key(tmp_path / "nope.key")
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = key_file(tmp_path, HEX)
    os.chown(path, 12345, -1)
    with pytest.raises(KeyFileError, match=f"{path} is owned by uid 12345"):
        read_key(path)


def test_the_config_refuses_a_bad_key_file_and_postgres_with_one(tmp_path: Path) -> None:
    loose = key_file(tmp_path, HEX, 0o644)
    config = tmp_path / "broker.toml"
    config.write_text(f'[ledger]\nkey_file = "{loose}"\n')
    with pytest.raises(ConfigError, match=f"key_file.*{loose}.*0644"):
        load_settings(config)
    good = key_file(tmp_path, HEX, name="good.key")
    config.write_text(f'[ledger]\nkey_file = "{good}"\n')
    assert load_settings(config).ledger.key() == Key(HEX)
    config.write_text(
        f'[ledger]\nkind = "postgres"\ndsn = "postgresql://x/y"\nkey_file = "{good}"\n'
    )
    with pytest.raises(ConfigError, match="TDE"):
        load_settings(config)
    config.write_text('[ledger]\nkey_file = ""\n')
    assert load_settings(config).ledger.key() is None


def test_without_the_extra_a_key_file_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.port.cipher as cipher

    monkeypatch.setattr(cipher, "_cipher", None)
    config = tmp_path / "broker.toml"
    config.write_text(f'[ledger]\nkey_file = "{key_file(tmp_path, HEX)}"\n')
    with pytest.raises(ConfigError, match=r"pip install 'agent-broker\[encryption\]'"):
        load_settings(config)


# -- connections ---------------------------------------------------------------


def test_an_encrypted_file_holds_no_plain_byte_and_a_plain_one_does(tmp_path: Path) -> None:
    secret, plain = tmp_path / "secret.db", tmp_path / "plain.db"
    write_marker(secret, Key(HEX))
    write_marker(plain, None)
    assert MARKER in raw(plain)  # the search finds what is there
    assert MARKER not in raw(secret)
    assert not secret.read_bytes().startswith(b"SQLite format 3")
    conn = connect(secret, key=Key(HEX), readonly=True)
    assert conn.execute("SELECT body FROM notes").fetchall() == [(MARKER.decode(),)]
    conn.close()


def test_a_wrong_key_and_a_key_for_a_plain_file_say_which(tmp_path: Path) -> None:
    secret, plain = tmp_path / "secret.db", tmp_path / "plain.db"
    write_marker(secret, Key("a passphrase of some length"))
    write_marker(plain, None)
    before = raw(secret), raw(plain)
    with pytest.raises(LedgerError, match=r"the key does not open the ledger .*secret\.db"):
        connect(secret, key=Key(HEX))
    with pytest.raises(LedgerError, match=r"plain\.db is not encrypted, but a key was given"):
        connect(plain, key=Key(HEX))
    with pytest.raises(DatabaseError, match="not a database"):
        connect(secret).execute("SELECT * FROM notes")
    assert (raw(secret), raw(plain)) == before  # nothing was written
    conn = connect(plain)  # a plain ledger without a key: as ever
    assert conn.execute("SELECT count(*) FROM notes").fetchone() == (1,)
    conn.close()


def test_a_backup_of_an_encrypted_ledger_is_encrypted(tmp_path: Path) -> None:
    secret, copy = tmp_path / "secret.db", tmp_path / "copy.db"
    write_marker(secret, Key(HEX))
    assert backup(secret, copy, Key(HEX)) == []
    assert MARKER not in copy.read_bytes()
    conn = connect(copy, key=Key(HEX), readonly=True)
    assert conn.execute("SELECT body FROM notes").fetchall() == [(MARKER.decode(),)]
    conn.close()
    with pytest.raises(LedgerError, match="the key does not open"):
        backup(secret, tmp_path / "other.db", Key("x" * 20))


# -- the ledger and the library ------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_the_ledger_opens_encrypted_with_its_writer(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "ledger.db"
    async with Ledger.open(path, writer=writer, key=Key(HEX)) as ledger:  # type: ignore[arg-type]
        assert ledger.key == Key(HEX)
    assert not path.read_bytes().startswith(b"SQLite format 3")
    with pytest.raises(LedgerError, match="the key does not open"):
        async with Ledger.open(path, writer=writer, key=Key("y" * 16)):  # type: ignore[arg-type]
            pass


@pytest.mark.anyio
async def test_the_library_store_opens_with_a_key_file(tmp_path: Path) -> None:
    from ledger.api.store import Store

    path, key = tmp_path / "lib.db", key_file(tmp_path, HEX)
    item = {"role": "user", "content": MARKER.decode()}
    async with await Store.open(path, key_file=key) as store:
        await store.append("s1", [item])
    assert MARKER not in raw(path)
    async with await Store.open(path, key_file=key) as store:
        assert await store.last("s1", 1) == [item]
    with pytest.raises(LedgerError, match="the key does not open"):
        await Store.open(path, key_file=key_file(tmp_path, "z" * 16, name="other.key"))
    with pytest.raises(LedgerError, match="encrypted ledger, open it with its key_file"):
        await Store.open(path)
