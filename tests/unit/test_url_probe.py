"""adapters.url_probe against small real HTTP servers on loopback (raw sockets here)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from adapters.attachments import attachment
from adapters.url_probe import Cooldown, UrlProbe, completed, from_headers

pytestmark = pytest.mark.anyio

Answer = Callable[[str, dict[str, str]], bytes | None]  # (method, headers) -> raw answer


@dataclass
class Site:
    base: str
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def raw(status: str, **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@asynccontextmanager
async def site(answer: Answer) -> AsyncIterator[Site]:
    """An HTTP server answering each request with `answer` (None: never answers)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    served = Site(f"http://127.0.0.1:{port}")

    async def handle(stream: SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            first, *lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
            headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
            served.requests.append((first.split()[0], headers))
            reply = answer(first.split()[0], headers)
            if reply is None:
                await anyio.sleep_forever()
            else:
                await stream.send(reply)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield served
        tg.cancel_scope.cancel()


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]  # bound, not listening: connections are refused


def link(url: str, name: str | None = None) -> dict[str, Any]:
    return attachment(name, None, None, url)


async def probed(bound_s: float, *files: dict[str, Any]) -> list[dict[str, Any]]:
    listed = list(files)
    async with UrlProbe(bound_s) as probe:
        await probe.fill(listed)
    return listed


async def test_head_gives_type_and_size() -> None:
    answer = raw("200 OK", Content_Type="image/png; charset=binary", Content_Length="1234")
    async with site(lambda _m, _h: answer) as s:
        [got] = await probed(2, link(f"{s.base}/up/x", "x"))
    assert (got["type"], got["size"]) == ("image/png", 1234)
    assert [method for method, _ in s.requests] == ["HEAD"]
    assert s.requests[0][1]["accept-encoding"] == "identity"


async def test_a_refused_head_falls_back_to_a_one_byte_range() -> None:
    def answer(method: str, headers: dict[str, str]) -> bytes:
        if method == "HEAD":
            return raw("405 Method Not Allowed", Content_Length="0")
        assert headers["range"] == "bytes=0-0"
        return raw("206 Partial Content", Content_Range="bytes 0-0/777", Content_Length="1")

    async with site(answer) as s:
        [got] = await probed(2, link(f"{s.base}/f/song.mp3"))
    assert (got["type"], got["size"]) == ("audio/mpeg", 777)  # no type served: the extension's


async def test_a_server_ignoring_the_range_gives_its_length_and_the_body_is_not_read() -> None:
    def answer(method: str, _headers: dict[str, str]) -> bytes:
        if method == "HEAD":
            return raw("200 OK", Content_Type="text/plain")
        return raw("200 OK", Content_Type="text/plain", Content_Length="50000") + b"x" * 100

    async with site(answer) as s:
        [got] = await probed(2, link(f"{s.base}/log"))
    assert (got["type"], got["size"]) == ("text/plain", 50000)


async def test_an_http_error_leaves_the_extensions_type_and_no_size() -> None:
    async with site(lambda _m, _h: raw("404 Not Found", Content_Length="0")) as s:
        probe = UrlProbe(2)
        async with probe:
            files = [link(f"{s.base}/gone.pdf")]
            await probe.fill(files)
        assert not probe.cooldown.blocked("127.0.0.1", anyio.current_time())  # it answered
    assert (files[0]["type"], files[0]["size"]) == ("application/pdf", None)


async def test_a_refused_connection_is_quick_and_the_host_rests(closed_port: int) -> None:
    probe = UrlProbe(2)
    async with probe:
        files = [link(f"http://127.0.0.1:{closed_port}/a.webm")]
        await probe.fill(files)
        assert probe.cooldown.blocked("127.0.0.1", anyio.current_time())
    assert (files[0]["type"], files[0]["size"]) == ("video/webm", None)


async def test_a_silent_server_costs_the_bound_once_then_nothing() -> None:
    async with site(lambda _m, _h: None) as s:
        probe = UrlProbe(0.2)
        async with probe:
            began = anyio.current_time()
            first = [link(f"{s.base}/a.png"), link(f"{s.base}/b.gif")]  # one deadline for both
            await probe.fill(first)
            assert anyio.current_time() - began < 0.2 + 0.3
            second = [link(f"{s.base}/c.png")]
            await probe.fill(second)
        # The host rests: c.png was not asked. (Under load the second of the first two
        # may not have been sent before their shared deadline.)
        assert 1 <= len(s.requests) <= 2
    assert [(f["type"], f["size"]) for f in first + second] == [
        ("image/png", None),
        ("image/gif", None),
        ("image/png", None),
    ]


async def test_what_the_message_states_is_not_asked_and_a_bound_of_zero_asks_nothing() -> None:
    async with site(lambda _m, _h: raw("200 OK", Content_Length="9")) as s:
        stated = attachment("a.png", "image/png", 5, f"{s.base}/a.png")
        [kept] = await probed(2, dict(stated))
        [unasked] = await probed(0, link(f"{s.base}/b.png"))
        [mxc] = await probed(2, link("mxc://server/abc", "c.txt"))
    assert s.requests == []
    assert kept == stated
    assert (unasked["type"], unasked["size"]) == ("image/png", None)
    assert (mxc["type"], mxc["size"]) == ("text/plain", None)


def test_what_states_the_type_and_size_wins_in_order() -> None:
    file = attachment("a.png", None, None, "https://x/a.bin")
    assert completed(file, ("image/webp", 10)) == {**file, "type": "image/webp", "size": 10}
    assert completed(file, ("application/octet-stream", 10))["type"] == "image/png"
    assert completed(attachment(None, None, None, "https://x/a.gif"), (None, None))["type"] == (
        "image/gif"
    )
    stated = attachment("a.png", "image/jpeg", 3, "https://x/a.png")
    assert completed(stated, ("image/webp", 10)) == stated


def test_headers_of_an_encoded_answer_give_no_size() -> None:
    response = httpx.Response(200, headers={"Content-Encoding": "gzip", "Content-Length": "10"})
    assert from_headers(response) == (None, None)
    partial = httpx.Response(206, headers={"Content-Range": "bytes 0-0/*"})
    assert from_headers(partial) == (None, None)


def test_a_host_rests_until_its_time_is_up() -> None:
    cooldown = Cooldown(60)
    cooldown.failed("h", now=100.0)
    assert cooldown.blocked("h", 159.9)
    assert not cooldown.blocked("other", 120.0)
    assert not cooldown.blocked("h", 160.0)
    assert not cooldown.blocked("h", 161.0)
