"""The adapter SDK, `brokerctl chat` and the webhook adapter against the real daemon.

Replies come from the echo engine, which answers with the input text.
Everything listens on 127.0.0.1 or a Unix socket; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from adapters.sdk import (
    Ack,
    Adapter,
    Backoff,
    BrokerUnreachable,
    Deliver,
    Delta,
    HandshakeRefused,
    MessageRejected,
    Tuning,
)
from adapters.webhook import WebhookConfig, run_webhook
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.wire import WAIT, query, running_daemon, uniq, wait_db

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

FAST = Tuning(reconnect=Backoff(initial=0.02, maximum=0.25))
OUTBOX_STATUS = "SELECT status FROM outbox WHERE out_id = ?"
PENDING = "SELECT count(*) FROM outbox WHERE channel = ? AND status = 'pending'"
SECRET = "s3cret-token"


@pytest.fixture(scope="module")
def shared() -> Iterator[DaemonProcess]:
    config = {"auth": {"channel_tokens": {"secure": SECRET}}}
    with running_daemon(config) as d:
        yield d


async def poll(
    check: Callable[[], bool | Awaitable[bool]], what: str, within: float = WAIT
) -> None:
    """Until `check` holds, every 20 ms (bounded)."""
    try:
        with anyio.fail_after(within):
            while True:
                result = check()
                if result if isinstance(result, bool) else await result:
                    return
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def next_deliver(adapter: Adapter, within: float = WAIT) -> Deliver:
    with anyio.fail_after(within):
        async for reply in adapter.replies():
            if isinstance(reply, Deliver):
                return reply
    raise AssertionError("the replies ended")


async def restart(d: DaemonProcess) -> None:
    await anyio.to_thread.run_sync(d.kill)
    await anyio.to_thread.run_sync(d.start)


def inbound_counts(d: DaemonProcess, channel: str) -> dict[str, int]:
    rows = query(d, "SELECT msg_id, count(*) FROM inbound WHERE channel = ? GROUP BY 1", channel)
    return {str(m): int(n) for m, n in rows}


def unanswered(d: DaemonProcess, channel: str, missing: set[str]) -> str:
    """What the ledger says about messages no reply answered (for a failure message)."""
    rows = query(
        d,
        "SELECT i.msg_id, q.status, q.reason, q.turn_id, t.status FROM queue_items q"
        " JOIN inbound i ON i.id = q.inbound_id LEFT JOIN turns t ON t.id = q.turn_id"
        " WHERE i.channel = ? ORDER BY q.seq",
        channel,
    )
    return f"no reply for {sorted(missing)}: {[r for r in rows if r[0] in missing]}"


# -- the SDK ----------------------------------------------------------------------


async def test_send_is_acked_and_the_reply_streams_then_is_confirmed(
    shared: DaemonProcess,
) -> None:
    channel, m = uniq("s"), uniq("m")
    async with Adapter.connect(shared.socket, channel) as a:
        ack = await a.send(m, uniq("+"), "the quick brown fox", sender_name="Ann")
        deltas: list[Delta] = []
        with anyio.fail_after(WAIT):
            async for reply in a.replies():
                if isinstance(reply, Delta):
                    deltas.append(reply)
                    continue
                break
        assert isinstance(reply, Deliver)
        assert query(shared, OUTBOX_STATUS, reply.out_id) == [("pending",)]
        await a.confirm(reply.out_id)
        await wait_db(shared, OUTBOX_STATUS, (reply.out_id,), "delivered")
    assert ack == Ack(m, ack.session, ack.item, False) and ack.session.startswith("dm:")
    assert (reply.status, reply.text, reply.in_reply_to) == ("final", "the quick brown fox", (m,))
    assert reply.session == ack.session and reply.frame["type"] == "deliver"
    assert "".join(d.text for d in deltas) == reply.text
    assert {d.out_id for d in deltas} == {reply.out_id}


async def test_concurrent_sends_are_pipelined_on_one_connection(shared: DaemonProcess) -> None:
    channel = uniq("p")
    msg_ids = [uniq("m") for _ in range(200)]
    acks: dict[str, Ack] = {}
    async with Adapter.connect(shared.socket, channel) as a:

        async def send(n: int, m: str) -> None:
            acks[m] = await a.send(m, f"+{n % 20}", f"text {n}", queue_mode="collect")

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for n, m in enumerate(msg_ids):
                    tg.start_soon(send, n, m)
        assert a.connects == 1
    assert set(acks) == set(msg_ids)
    assert all(ack.msg_id == m and not ack.duplicate for m, ack in acks.items())
    assert len({ack.item for ack in acks.values()}) == len(msg_ids)
    assert inbound_counts(shared, channel) == dict.fromkeys(msg_ids, 1)


async def test_a_resend_is_answered_with_the_first_ack_marked_duplicate(
    shared: DaemonProcess,
) -> None:
    m, sender = uniq("m"), uniq("+")
    async with Adapter.connect(shared.socket, uniq("d")) as a:
        first = await a.send(m, sender, "once")
        again = await a.send(m, sender, "once")
    assert not first.duplicate and again.duplicate
    assert (again.session, again.item) == (first.session, first.item)


async def test_invalid_input_raises_a_typed_error_and_the_connection_stays(
    shared: DaemonProcess,
) -> None:
    sender = uniq("+")
    async with Adapter.connect(shared.socket, uniq("i")) as a:
        with pytest.raises(MessageRejected) as bad_mode:
            await a.send(uniq("m"), sender, "x", queue_mode="sideways")
        with pytest.raises(MessageRejected) as no_peer:
            await a.send(uniq("m"), sender, "x", peer_kind="group")
        with pytest.raises(MessageRejected) as long_id:
            await a.send("m" * 129, sender, "x")
        with pytest.raises(MessageRejected) as bad_ts:
            await a.send(uniq("m"), sender, "x", ts="yesterday")
        ack = await a.send(uniq("m"), sender, "still fine")
        assert a.connects == 1
    assert [(e.value.code, e.value.field) for e in (bad_mode, no_peer, long_id, bad_ts)] == [
        ("invalid", "queue_mode"),
        ("invalid", "peer_id"),
        ("invalid", "msg_id"),
        ("invalid", "ts"),
    ]
    assert bad_mode.value.message and not ack.duplicate


async def test_a_refused_handshake_and_a_missing_broker_raise_at_connect(
    shared: DaemonProcess, short_tmp: Path
) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        async with Adapter.connect(shared.socket, "secure", token="wrong"):
            pass
    assert refused.value.code == "unauthorized"
    with pytest.raises(BrokerUnreachable):
        async with Adapter.connect(short_tmp / "nobody.sock", "x"):
            pass
    async with Adapter.connect(shared.socket, "secure", token=SECRET) as a:
        assert not (await a.send(uniq("m"), uniq("+"), "hi")).duplicate


async def test_auto_confirm_confirms_once_the_consumer_asks_for_more(
    shared: DaemonProcess,
) -> None:
    async with Adapter.connect(shared.socket, uniq("a"), auto_confirm=True) as a:
        await a.send(uniq("m"), uniq("+"), "auto")
        replies = a.replies()
        with anyio.fail_after(WAIT):
            while not isinstance(reply := await anext(replies), Deliver):
                pass
        assert query(shared, OUTBOX_STATUS, reply.out_id) == [("pending",)]
        with anyio.move_on_after(0.2):
            await anext(replies)  # asking the same iterator for more confirms it
        await wait_db(shared, OUTBOX_STATUS, (reply.out_id,), "delivered")


async def test_overloaded_sends_are_retried_until_acked(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"max_inflight": 1})
    channel = uniq("o")
    msg_ids = [uniq("m") for _ in range(60)]
    tuning = Tuning(overload=Backoff(initial=0.01, maximum=0.05))
    async with Adapter.connect(d.socket, channel, tuning=tuning) as a:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for n, m in enumerate(msg_ids):
                    tg.start_soon(a.send, m, f"+{n % 6}", "x", "dm", None, None, None, "collect")
        assert a.overloaded > 0
    assert inbound_counts(d, channel) == dict.fromkeys(msg_ids, 1)


async def test_unacked_messages_are_resent_after_the_broker_restarts(
    make_daemon: DaemonFactory,
) -> None:
    d = make_daemon({"engine": {"chunks": 2, "delay_ms": 10}})
    channel = uniq("k")
    before = [uniq("b") for _ in range(50)]  # acked before the kill
    racing = [uniq("r") for _ in range(50)]  # sent as the kill lands
    down = [uniq("d") for _ in range(50)]  # sent while the broker is down
    everything = before + racing + down
    acks: dict[str, Ack] = {}
    answered: set[str] = set()
    out_ids: list[str] = []

    async with Adapter.connect(d.socket, channel, tuning=FAST) as a:

        async def send(n: int, m: str) -> None:
            acks[m] = await a.send(m, f"+{n % 10}", f"text {n}", queue_mode="followup")

        async def confirm_replies() -> None:
            async for reply in a.replies():
                if isinstance(reply, Deliver):
                    out_ids.append(reply.out_id)
                    answered.update(reply.in_reply_to)
                    await a.confirm(reply.out_id)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(confirm_replies)
                async with anyio.create_task_group() as senders:
                    for n, m in enumerate(before):
                        senders.start_soon(send, n, m)
                    await poll(lambda: len(acks) == len(before), "the first acks")
                    for n, m in enumerate(racing):
                        senders.start_soon(send, n, m)
                    await anyio.to_thread.run_sync(d.kill)
                    await poll(lambda: not a.connected, "the SDK to see the broker gone")
                    for n, m in enumerate(down):
                        senders.start_soon(send, n, m)
                    await anyio.sleep(0.1)  # they wait, kept, while nobody listens
                    assert not set(down) & set(acks)
                    await anyio.to_thread.run_sync(d.start)
                try:
                    await poll(lambda: answered >= set(everything), "the replies", within=20)
                except AssertionError:
                    raise AssertionError(
                        unanswered(d, channel, set(everything) - answered)
                    ) from None
                await wait_db(d, PENDING, (channel,), 0)
                tg.cancel_scope.cancel()
        assert a.connects == 2
    assert set(acks) == set(everything)
    assert not any(acks[m].duplicate for m in before + down)
    assert inbound_counts(d, channel) == dict.fromkeys(everything, 1)
    assert len(out_ids) == len(set(out_ids)), "a deliver was handed out twice"


async def test_a_repeated_deliver_is_dropped_and_a_lost_confirmation_repeated(
    make_daemon: DaemonFactory,
) -> None:
    d = make_daemon()
    sender = uniq("+")
    async with Adapter.connect(d.socket, uniq("r"), tuning=FAST) as a:
        await a.send(uniq("m"), sender, "first")
        first = await next_deliver(a)  # not confirmed: the broker will send it again
        await restart(d)
        with anyio.fail_after(WAIT):
            await a.wait_connected()
        second_msg = uniq("m")
        await a.send(second_msg, sender, "second")
        second = await next_deliver(a)  # the repeat of `first` was dropped
        assert second.in_reply_to == (second_msg,)
        assert any('"resent unconfirmed replies"' in line for line in d.log_lines())
        await a.confirm(first.out_id)
        await a.confirm(second.out_id)
        await wait_db(d, OUTBOX_STATUS, (first.out_id,), "delivered", within=3 * WAIT)

        third_msg = uniq("m")
        await a.send(third_msg, sender, "third")
        third = await next_deliver(a)
        await anyio.to_thread.run_sync(d.kill)
        await a.confirm(third.out_id)  # lost: nobody listens
        await anyio.to_thread.run_sync(d.start)
        # The broker sends it again on reconnect; the SDK confirms the repeat.
        # A restart and the SDK's reconnect backoff: more than one ordinary wait.
        await wait_db(d, OUTBOX_STATUS, (third.out_id,), "delivered", within=3 * WAIT)
        assert query(d, OUTBOX_STATUS, second.out_id) == [("delivered",)]


def docs_example() -> str:
    """The complete example adapter of docs/adapters.md."""
    text = (Path(__file__).parents[2] / "docs" / "adapters.md").read_text()
    section = text.split("### A complete adapter", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@asyncio_only
async def test_the_example_adapter_in_the_docs_works_and_reruns_as_duplicates(
    shared: DaemonProcess, short_tmp: Path
) -> None:
    script, lines = short_tmp / "lines_adapter.py", short_tmp / "messages.txt"
    script.write_text(docs_example())
    lines.write_text("ann: hello\nno separator here\nbob: bye\n")
    channel = uniq("l")
    command = [sys.executable, str(script), str(shared.socket), str(lines), channel]
    with anyio.fail_after(30):
        first = await anyio.run_process(command, check=False)
        again = await anyio.run_process(command, check=False)
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    out = first.stdout.decode()
    assert "messages.txt:1 <- [final] hello" in out and "messages.txt:3 <- [final] bye" in out
    assert again.stdout.decode().count("(duplicate)") == 2
    assert "<-" not in again.stdout.decode()
    await wait_db(shared, PENDING, (channel,), 0)
    assert inbound_counts(shared, channel) == {"messages.txt:1": 1, "messages.txt:3": 1}


# -- brokerctl chat ---------------------------------------------------------------


def brokerctl() -> list[str]:
    return [sys.executable, "-c", "from brokerctl.main import main; main()"]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}


@asyncio_only
async def test_chat_sends_piped_lines_prints_replies_and_confirms(
    shared: DaemonProcess,
) -> None:
    channel = uniq("t")
    lines = ["hello there", "", "second line", "/status"]
    command = [*brokerctl(), "chat", "--socket", str(shared.socket), "--channel", channel]
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [*command, "--mode", "followup", "--wait", "20"],
            input=("\n".join(lines) + "\n").encode(),
            env=clean_env(),
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    printed = out.splitlines()
    assert "hello there" in printed and "second line" in printed
    assert any(line.startswith("state: ") and "waiting:" in line for line in printed)
    assert any(line.startswith("# dm:") for line in printed)  # the queue state lines
    await wait_db(shared, PENDING, (channel,), 0)
    assert query(shared, "SELECT count(*) FROM outbox WHERE channel = ?", channel) == [(3,)]
    assert sorted(inbound_counts(shared, channel).values()) == [1, 1, 1]


@asyncio_only
async def test_chat_says_so_when_the_broker_is_unreachable(short_tmp: Path) -> None:
    with anyio.fail_after(20):
        done = await anyio.run_process(
            [*brokerctl(), "chat", "--socket", str(short_tmp / "none.sock")],
            input=b"hi\n",
            env=clean_env(),
            check=False,
        )
    assert done.returncode == 2
    assert "cannot reach the broker" in done.stderr.decode()


# -- the webhook ------------------------------------------------------------------


class Receiver:
    """A reply receiver on 127.0.0.1 (a thread): records POSTs, fails the first N."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.attempts = 0
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer._lock:
                    outer.attempts += 1
                    fail = outer.attempts <= outer.fail_first
                    if not fail:
                        outer.got.append((dict(self.headers.items()), orjson.loads(body)))
                self.send_response(500 if fail else 204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/replies"

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [body for _, body in self.got]


@contextlib.contextmanager
def receiver(fail_first: int = 0) -> Iterator[Receiver]:
    r = Receiver(fail_first)
    thread = threading.Thread(target=r.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
        thread.join(5)


@contextlib.asynccontextmanager
async def webhook(
    d: DaemonProcess, reply_url: str, channel: str, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The webhook adapter in this process; a client whose base URL is it."""
    retry = Backoff(initial=0.02, maximum=0.1)
    cfg = WebhookConfig(d.socket, channel, reply_url, port=0, retry=retry, **options)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(run_webhook, cfg, stop)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

                async def connected() -> bool:
                    return bool((await client.get("/health")).json()["connected"])

                await poll(connected, "the webhook to connect")
                yield client
        finally:
            stop.set()


def message(**fields: Any) -> dict[str, Any]:
    return {"msg_id": uniq("w"), "sender_id": uniq("+"), "text": "via webhook", **fields}


async def test_webhook_post_is_acked_and_the_reply_posted_then_confirmed(
    shared: DaemonProcess,
) -> None:
    channel = uniq("h")
    msg = message(sender_name="Bo", thread_id="t-1")
    with receiver() as r:
        async with webhook(shared, r.url, channel) as client:
            accepted = await client.post("/messages", json=msg)
            again = await client.post("/messages", json=msg)
            await poll(lambda: len(r.bodies()) == 1, "the reply at the receiver")
            (reply,) = r.bodies()
            await wait_db(shared, OUTBOX_STATUS, (reply["out_id"],), "delivered")
    assert accepted.status_code == 202 and again.status_code == 202
    ack = accepted.json()
    assert set(ack) == {"session", "item", "duplicate"} and ack["duplicate"] is False
    assert again.json() == {**ack, "duplicate": True}
    assert reply["type"] == "deliver" and reply["text"] == "via webhook"
    assert reply["in_reply_to"] == [msg["msg_id"]] and reply["session"] == ack["session"]
    assert reply["thread_id"] == "t-1"


@asyncio_only
async def test_webhook_retries_a_failing_receiver_and_confirms_after_2xx(
    shared: DaemonProcess,
) -> None:
    channel = uniq("h")
    with receiver(fail_first=3) as r:
        async with webhook(shared, r.url, channel) as client:
            assert (await client.post("/messages", json=message())).status_code == 202
            await poll(lambda: len(r.bodies()) == 1, "the reply after the failures")
            out_id = r.bodies()[0]["out_id"]
            await wait_db(shared, OUTBOX_STATUS, (out_id,), "delivered")
    assert r.attempts == 4


@asyncio_only
async def test_webhook_refuses_bad_input_bad_secret_and_big_bodies(
    shared: DaemonProcess,
) -> None:
    channel = uniq("h")
    with receiver() as r:
        async with webhook(shared, r.url, channel, secret=SECRET, max_body=4096) as client:
            ok = {"x-webhook-secret": SECRET}
            invalid = await client.post("/messages", json=message(queue_mode="x"), headers=ok)
            missing = await client.post("/messages", json={"text": "no ids"}, headers=ok)
            not_json = await client.post("/messages", content=b"{nope", headers=ok)
            no_secret = await client.post("/messages", json=message())
            wrong = await client.post(
                "/messages", json=message(), headers={"x-webhook-secret": "guess"}
            )
            big = await client.post("/messages", json=message(text="x" * 5000), headers=ok)
            elsewhere = await client.post("/other", json=message(), headers=ok)
            accepted = await client.post("/messages", json=message(), headers=ok)
            await poll(lambda: len(r.bodies()) == 1, "the one reply")
    assert (invalid.status_code, invalid.json()["code"], invalid.json()["field"]) == (
        400,
        "invalid",
        "queue_mode",
    )
    assert (missing.status_code, missing.json()["field"]) == (400, "msg_id")
    assert (not_json.status_code, not_json.json()["code"]) == (400, "bad_json")
    assert no_secret.status_code == wrong.status_code == 401
    assert big.status_code == 413 and elsewhere.status_code == 404
    assert accepted.status_code == 202
    headers, _ = r.got[0]
    assert {k.lower(): v for k, v in headers.items()}["x-webhook-secret"] == SECRET
    assert query(shared, "SELECT count(*) FROM inbound WHERE channel = ?", channel) == [(1,)]


@asyncio_only
async def test_webhook_answers_503_while_the_broker_is_down(make_daemon: DaemonFactory) -> None:
    d = make_daemon()
    with receiver() as r:
        async with webhook(d, r.url, uniq("h"), ack_timeout=2.0) as client:
            await anyio.to_thread.run_sync(d.kill)
            await poll(
                lambda: _health(client, connected=False), "the webhook to see the broker gone"
            )
            down = await client.post("/messages", json=message())
    assert down.status_code == 503 and down.json()["code"] == "unavailable"


async def _health(client: httpx.AsyncClient, *, connected: bool) -> bool:
    return bool((await client.get("/health")).json()["connected"] is connected)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asyncio_only
async def test_webhook_command_serves_and_stops_cleanly_on_sigterm(
    shared: DaemonProcess, short_tmp: Path
) -> None:
    channel, port = uniq("h"), free_port()
    log = (short_tmp / "webhook.log").open("wb")
    with receiver() as r, log:
        command = [sys.executable, "-m", "adapters.webhook", "--socket", str(shared.socket)]
        command += ["--channel", channel, "--listen", f"127.0.0.1:{port}", "--reply-url", r.url]
        proc = await anyio.open_process(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

                async def up() -> bool:
                    with contextlib.suppress(httpx.TransportError):
                        return await _health(client, connected=True)
                    return False

                await poll(up, "the webhook process to serve")
                accepted = await client.post("/messages", json=message())
                await poll(lambda: len(r.bodies()) == 1, "the reply")
                await wait_db(shared, OUTBOX_STATUS, (r.bodies()[0]["out_id"],), "delivered")
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await proc.aclose()
    assert accepted.status_code == 202
    assert code == 0, (short_tmp / "webhook.log").read_text()
