"""`brokerctl encrypt` and `rekey`: a ledger encrypted at rest (docs/security.md).

Both run with the daemon stopped: they take the ledger's owner lock, so a running
daemon or an open Store makes them refuse and change nothing. `encrypt` leaves no
plain copy of the ledger behind (ledger/transfer.py), and `rekey` leaves no page
under the old key. Neither edits the config: the operator points `[ledger]
key_file` at the new key file, as the command's last line says.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from brokerctl.app import app, console, opts

EX_DATAERR, EX_UNAVAILABLE, EX_CONFIG = 65, 69, 78

KeyFileOption = Annotated[Path, typer.Option("--key-file", help="The key file (mode 0600).")]


def _fail(message: object, status: int) -> NoReturn:
    print(f"brokerctl: {message}", file=sys.stderr)
    raise typer.Exit(status)


def _ledger_path() -> Path:
    from broker.config import ConfigError, load_settings  # here: a fast start

    try:
        ledger = load_settings(opts["config"]).ledger
    except ConfigError as exc:
        _fail(exc, EX_CONFIG)
    if ledger.kind == "postgres":
        _fail(
            "the ledger is on PostgreSQL: encryption at rest is the database's"
            " (TDE or an encrypted disk), not brokerctl's",
            EX_CONFIG,
        )
    if not ledger.path.exists():
        _fail(f"no ledger at {ledger.path}", 1)
    return ledger.path


def _run(action: str, work: Callable[..., None], *args: object) -> None:
    from ledger.api.errors import LedgerInUse
    from ledger.port.cipher import KeyFileError
    from ledger.port.errors import LedgerError

    try:
        work(*args)
    except LedgerInUse as exc:
        _fail(
            f"cannot {action} while the ledger is in use; stop the daemon first ({exc})",
            EX_UNAVAILABLE,
        )
    except KeyFileError as exc:
        _fail(exc, EX_CONFIG)
    except LedgerError as exc:
        _fail(exc, EX_DATAERR)


@app.command()
def encrypt(key_file: KeyFileOption) -> None:
    """Encrypt the (stopped) daemon's plain ledger in place with the key in KEY_FILE."""
    from ledger.port.cipher import KeyFileError, read_key
    from ledger.transfer import encrypt_in_place

    path = _ledger_path()
    try:
        key = read_key(key_file)
    except KeyFileError as exc:
        _fail(exc, EX_CONFIG)
    _run("encrypt it", encrypt_in_place, path, key)
    console.print(
        f"encrypted {path}; now set [ledger] key_file = {str(key_file)!r} in the config",
        markup=False,
        soft_wrap=True,  # a path broken over two lines cannot be copied
    )


@app.command()
def rekey(
    key_file: KeyFileOption,
    new_key_file: Annotated[Path, typer.Option("--new-key-file", help="The new key file.")],
) -> None:
    """Encrypt the (stopped) daemon's ledger with the key in NEW_KEY_FILE instead."""
    from ledger.port.cipher import KeyFileError, read_key
    from ledger.transfer import rekey as rekey_ledger

    path = _ledger_path()
    try:
        old, new = read_key(key_file), read_key(new_key_file)
    except KeyFileError as exc:
        _fail(exc, EX_CONFIG)
    _run("rekey it", rekey_ledger, path, old, new)
    console.print(
        f"rekeyed {path}; now set [ledger] key_file = {str(new_key_file)!r}",
        markup=False,
        soft_wrap=True,
    )
