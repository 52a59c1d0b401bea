"""adapters.matrix against a real Synapse: a token the server dropped, the rooms
configured to join, and what a room carries besides plain text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from nio import RoomCreateResponse, RoomVisibility

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_db
from tests.realservers.matrix_client import MatrixPerson, from_user
from tests.realservers.processes import AdapterProcess
from tests.realservers.servers import Server
from tests.realservers.test_matrix import BOT, dm_with, matrix_config, start_adapter

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture
async def ann(synapse: Server) -> Any:
    person = await MatrixPerson(synapse, "ann").start()
    yield person
    await person.close()


async def test_a_token_logged_out_mid_run_is_replaced_by_a_new_login(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    proc = start_adapter(adapters, short_tmp, matrix_config(d.socket, synapse, short_tmp))
    dm = await dm_with(ann)
    await ann.say(dm, "before the logout")
    await ann.expect(from_user(BOT, dm, "before the logout"))

    stored = proc.state_dir / "matrix-login.json"
    old_token = orjson.loads(stored.read_bytes())["access_token"]
    base = f"http://{synapse.host}:{synapse.port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        gone = await http.post(
            "/_matrix/client/v3/logout", headers={"Authorization": f"Bearer {old_token}"}
        )
        gone.raise_for_status()
    # Sent while the adapter's token is dead: read after the new login, once.
    await ann.say(dm, "after the logout")
    await ann.expect(from_user(BOT, dm, "after the logout"), within=30)

    assert "M_UNKNOWN_TOKEN" in proc.log()
    assert orjson.loads(stored.read_bytes())["access_token"] != old_token
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 2)
    replies = [e for e in ann.seen if e.get("sender") == BOT and e.get("type") == "m.room.message"]
    assert [e["content"]["body"] for e in replies] == ["before the logout", "after the logout"]


async def test_the_rooms_configured_are_joined_and_files_and_unknown_types_keep_their_text(
    synapse: Server,
    ann: MatrixPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    alias = uniq("public")
    made = await ann.client.room_create(visibility=RoomVisibility.public, alias=alias)
    assert isinstance(made, RoomCreateResponse), made
    room = str(made.room_id)
    bob = await MatrixPerson(synapse, "bob").start()  # three people: a group, not a DM
    await bob.join(room)
    await bob.close()
    d = make_daemon()
    cfg = matrix_config(d.socket, synapse, short_tmp, rooms=[f"#{alias}:localhost"])
    cfg["matrix"]["accept_invites"] = False  # joined from `rooms`, not from an invite
    start_adapter(adapters, short_tmp, cfg)

    await ann.say(room, "bot: hello joined room")
    await ann.expect(from_user(BOT, room, "bot: hello joined room"))
    report = {
        "msgtype": "m.file",
        "body": "bot: the report",
        "filename": "report.pdf",
        "url": "mxc://localhost/report",
        "info": {"mimetype": "application/pdf", "size": 52314},
    }
    await ann.send(room, report)
    await ann.expect(from_user(BOT, room, "bot: the report"))
    await ann.send(room, {"msgtype": "org.example.poll", "body": "bot: a poll, as text"})
    await ann.expect(from_user(BOT, room, "bot: a poll, as text"))

    rows = query(d, "SELECT text, meta FROM inbound")
    metas = {r[0]: orjson.loads(r[1] or "{}") for r in rows}
    assert metas["bot: the report"]["attachments"] == [
        {
            "kind": "m.file",
            "name": "report.pdf",
            "type": "application/pdf",
            "size": 52314,
            "url": "mxc://localhost/report",
        }
    ]
    assert "attachments" not in metas["bot: a poll, as text"]
    assert all(m["mentioned"] for m in metas.values())
