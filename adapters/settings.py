"""Settings of the chat-server adapters: one TOML file, secrets kept apart.

    [broker]                      # how the adapter reaches the broker
    socket = "/run/broker/broker.sock"
    channel = "irc"               # the broker's channel name for this adapter
    token_file = "..."            # optional; else $CREDENTIALS_DIRECTORY/broker-token
    [adapter]
    state_dir = "/var/lib/broker-adapter-irc"   # positions and spool
    give_up_s = 300               # server down this long -> exit 75
    [irc] / [xmpp] / ...          # the protocol's own section (its module reads it)

A secret is never on the command line nor in the TOML file: it is read from the file
the section names (`password_file`, `token_file`) or, failing that, from
`$CREDENTIALS_DIRECTORY/<name>` (systemd's LoadCredential=). A secret named but
missing is a clear error at start.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SettingsError(Exception):
    """The configuration cannot be used; the message says which key and why."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BrokerSection(Strict):
    socket: Path
    channel: str = Field(min_length=1, max_length=64)
    token_file: Path | None = None


class AdapterSection(Strict):
    state_dir: Path
    give_up_s: float = Field(default=300.0, gt=0)
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=30.0, gt=0)
    log_level: str = "INFO"


Section = TypeVar("Section", bound=BaseModel)


def load_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read the config {path}: {exc}") from exc


def section(raw: dict[str, Any], name: str, model: type[Section]) -> Section:
    """The `[name]` table of `raw` as `model`; a SettingsError naming the key if wrong."""
    table = raw.get(name, {})
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in (name, *first["loc"]))
        raise SettingsError(f"config {where}: {first['msg']}") from exc


def read_secret(name: str, path: Path | None, *, required: bool = True) -> str | None:
    """A secret from `path`, else from `$CREDENTIALS_DIRECTORY/name`."""
    candidates = [path] if path is not None else []
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if path is None and credentials:
        candidates.append(Path(credentials) / name)
    for candidate in candidates:
        try:
            return candidate.read_text().rstrip("\r\n")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SettingsError(f"cannot read the secret {name} from {candidate}: {exc}") from exc
    if required:
        looked = ", ".join(str(c) for c in candidates) or "no file and no $CREDENTIALS_DIRECTORY"
        raise SettingsError(f"the secret {name} is missing (looked in: {looked})")
    return None
