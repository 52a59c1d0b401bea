"""adapters.xmpp against a real Prosody: files shared as links get a type and a size.

Ann uploads a file through the server's own upload service (XEP-0363,
Prosody's mod_http_file_share on loopback) with slixmpp, and sends its URL as
out-of-band data (XEP-0066), as Conversations and Dino do: the adapter asks
the file's server (HEAD) and the broker stores the file's name, type and
size next to the text. A link to a server that never answers costs the
message no more than the bound: the text arrives, the type from the name's
extension, the size null.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from slixmpp import JID

from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_until
from tests.realservers.processes import AdapterProcess
from tests.realservers.servers import Server
from tests.realservers.test_xmpp import BOT, body_from, start_adapter, xmpp_config
from tests.realservers.xmpp_client import XmppPerson

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # 1032 bytes


@pytest.fixture
async def ann(prosody: Server) -> Any:
    person = await XmppPerson(prosody, "ann", plugins=("xep_0066", "xep_0363")).start()
    yield person
    await person.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP address that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def send_link(person: XmppPerson, url: str, text: str, desc: str = "") -> None:
    msg = person.client.make_message(JID(BOT), text, mtype="chat")
    msg["id"] = uniq("oob")
    msg["oob"]["url"] = url
    if desc:
        msg["oob"]["desc"] = desc
    msg.send()


def stored_meta(d: Any, text: str) -> dict[str, Any]:
    rows = query(d, "SELECT meta FROM inbound WHERE text = ?", text)
    assert len(rows) == 1, rows
    meta: dict[str, Any] = orjson.loads(rows[0][0])
    return meta


async def test_an_uploaded_file_is_passed_with_its_name_type_and_size(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, xmpp_config(d.socket, prosody, short_tmp))
    with anyio.fail_after(10):
        url = await ann.client.plugin["xep_0363"].upload_file(
            "report card.png",
            size=len(PNG),
            content_type="image/png",
            input_file=io.BytesIO(PNG),
            domain=JID("upload.localhost"),
            timeout=10,
        )
    assert url.startswith(f"http://127.0.0.1:{prosody.http_port}/")
    send_link(ann, url, url)  # the body is the URL, as clients send a file
    await ann.expect(body_from(BOT, url))

    assert stored_meta(d, url)["attachments"] == [
        {"name": "report card.png", "type": "image/png", "size": len(PNG), "url": url}
    ]


async def test_a_link_nobody_answers_costs_the_message_only_the_bound(
    prosody: Server,
    ann: XmppPerson,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
    silent_server: str,
) -> None:
    d = make_daemon()
    cfg = xmpp_config(d.socket, prosody, short_tmp, attachment_probe_s=0.4)
    proc = start_adapter(adapters, short_tmp, cfg)
    url = f"http://{silent_server}/files/notes%20v2.pdf"
    text = uniq("the notes ")
    began = anyio.current_time()
    send_link(ann, url, text)
    await ann.expect(body_from(BOT, text))
    # The bound, plus a round trip through the server, broker and echo engine.
    assert anyio.current_time() - began < 0.4 + 2.0

    assert stored_meta(d, text)["attachments"] == [
        {"name": "notes v2.pdf", "type": "application/pdf", "size": None, "url": url}
    ]

    async def logged() -> bool:
        return f"attachment {url}: no answer within 0.4s" in proc.log()

    await wait_until(logged, "the probe's timeout logged")
    # The host is not asked again for a while: the next link to it is not probed.
    again = uniq("again ")
    cat = f"http://{silent_server}/cat.jpg"
    send_link(ann, cat, again, desc="a cat")
    await ann.expect(body_from(BOT, again))
    assert stored_meta(d, again)["attachments"] == [
        {"name": "a cat", "type": "image/jpeg", "size": None, "url": cat}
    ]
    assert f"attachment {cat}" not in proc.log()
