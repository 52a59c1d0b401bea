"""The adapter's Matrix login: kept on disk so a restart is the same device.

The access token and device id are stored (mode 0600) in the state directory after a
password login and used again on the next start: the same device keeps the server's
transaction ids, so a reply sent again under the same txn id after a restart is the
same event, not a second message. A stored token the server no longer knows
(M_UNKNOWN_TOKEN) is dropped and the password login done again. Every request has a
bound (`request_timeout_s`; a sync, its long poll plus that) and nio retries nothing
by itself: rate limits and lost connections come back to the adapter, which logs
them and decides.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import orjson
from nio import AsyncClient, AsyncClientConfig, LoginError, LoginResponse, WhoamiResponse


class LoginRefused(ConnectionError):
    """The server refused the adapter's credentials."""


def new_client(homeserver: str, user_id: str, request_timeout_s: float) -> AsyncClient:
    config = AsyncClientConfig(
        max_limit_exceeded=0,
        max_timeouts=0,
        request_timeout=request_timeout_s,
        store_sync_tokens=False,
        encryption_enabled=False,
    )
    return AsyncClient(homeserver, user_id, config=config)


class StoredLogin:
    """The login of the last run, in `<state_dir>/matrix-login.json`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "matrix-login.json"

    def load(self) -> dict[str, str] | None:
        with contextlib.suppress(FileNotFoundError, orjson.JSONDecodeError):
            loaded = orjson.loads(self.path.read_bytes())
            if isinstance(loaded, dict) and {"access_token", "device_id"} <= loaded.keys():
                return {str(k): str(v) for k, v in loaded.items()}
        return None

    def save(self, user_id: str, device_id: str, access_token: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(
                orjson.dumps(
                    {"user_id": user_id, "device_id": device_id, "access_token": access_token}
                )
            )
        os.replace(tmp, self.path)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


async def log_in(client: AsyncClient, password: str, stored: StoredLogin, device_name: str) -> None:
    """The stored login if the server still knows it, else a password login."""
    kept = stored.load()
    if kept is not None and kept.get("user_id") == client.user:
        client.restore_login(client.user, kept["device_id"], kept["access_token"])
        answer = await client.whoami()
        if isinstance(answer, WhoamiResponse):
            return
        if getattr(answer, "status_code", None) != "M_UNKNOWN_TOKEN":
            raise ConnectionError(f"whoami: {answer}")
        stored.forget()
        client.access_token = ""
    reply = await client.login(password, device_name=device_name)
    if isinstance(reply, LoginError):
        if reply.status_code in ("M_FORBIDDEN", "M_USER_DEACTIVATED", "M_INVALID_PARAM"):
            raise LoginRefused(f"login refused: {reply.status_code} {reply.message}")
        raise ConnectionError(f"login: {reply.status_code} {reply.message}")
    assert isinstance(reply, LoginResponse)
    stored.save(reply.user_id, reply.device_id, reply.access_token)
