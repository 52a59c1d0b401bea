"""HTTP webhook adapter: messages in by POST, replies out by POST.

    python -m adapters.webhook --socket PATH --channel NAME \\
        --listen 127.0.0.1:8080 --reply-url http://127.0.0.1:9000/replies \\
        [--token TOKEN] [--secret SECRET] [--delta-url URL]

`POST /messages` with `{msg_id, sender_id, text, peer_kind?, peer_id?,
thread_id?, sender_name?, queue_mode?, ts?, meta?}` is answered
`202 {"session", "item", "duplicate"}`; `400` with the broker's error
(`{"code", "message", "field"}`) for invalid input; `401` for a missing or
wrong `X-Webhook-Secret`; `413` for a body over the limit; `503` while the
broker is unreachable (retry later, the same msg_id is safe to resend).
`GET /health` says whether the broker connection is up.

202 means the broker committed the message; nothing else does. Each reply is POSTed
(the `deliver` frame as JSON, with the secret header when one is set) to the reply
URL, retried with backoff until it answers 2xx, and only then confirmed to the broker;
replies go out one at a time, in order, so a receiver that is down holds up the ones
after it, and once the SDK's buffer is full, inbound acks too (503s after
`ack_timeout`): that is the backpressure. An unconfirmed reply is delivered again by
the broker after a restart or reconnect. Deltas are forwarded only with `--delta-url`,
once, best effort. SIGTERM or SIGINT stops accepting, lets open requests finish within
the grace period, then stops; a second signal stops at once.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import random
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import orjson
from anyio.abc import SocketAttribute

from adapters.http import HttpServer, Limits, Request, Response
from adapters.sdk import Adapter, AdapterError, Backoff, Deliver, Delta, MessageRejected

log = logging.getLogger("adapters.webhook")

FIELDS = (
    "msg_id",
    "sender_id",
    "text",
    "peer_kind",
    "peer_id",
    "thread_id",
    "sender_name",
    "queue_mode",
    "ts",
    "meta",
)
_STATUS_OF = {"frame_too_large": 413, "internal": 500}  # other broker errors: 400
_JSON = {"content-type": "application/json"}


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    socket: Path
    channel: str
    reply_url: str
    host: str = "127.0.0.1"
    port: int = 8080  # 0: any free port (run_webhook reports the one bound)
    token: str | None = None
    secret: str | None = None
    delta_url: str | None = None
    max_body: int = 1 << 20
    ack_timeout: float = 10.0  # a POST waits this long for the broker's ack, then 503
    post_timeout: float = 10.0  # one reply POST
    retry: Backoff = field(default_factory=lambda: Backoff(initial=0.1, maximum=30.0))
    grace: float = 5.0  # for requests in progress at shutdown
    replies_buffer: int = 256


class Inbox:
    """The HTTP side: requests in, messages to the broker."""

    def __init__(self, adapter: Adapter, cfg: WebhookConfig) -> None:
        self.adapter = adapter
        self.cfg = cfg
        self._secret = cfg.secret.encode() if cfg.secret is not None else None

    async def __call__(self, request: Request) -> Response:
        if request.path == "/health":
            return Response.json(200, {"connected": self.adapter.connected})
        if request.path != "/messages":
            return _error(404, "not_found", f"no route {request.path}")
        if request.method != "POST":
            return Response.json(405, {"code": "method", "message": "use POST"}, ("allow", "POST"))
        if not self._authorized(request):
            return _error(401, "unauthorized", "missing or wrong X-Webhook-Secret")
        fields = _fields(request.body)
        if isinstance(fields, Response):
            return fields
        return await self._submit(fields)

    def _authorized(self, request: Request) -> bool:
        if self._secret is None:
            return True
        given = request.headers.get("x-webhook-secret", b"")
        return hmac.compare_digest(given, self._secret)

    async def _submit(self, fields: dict[str, Any]) -> Response:
        if not self.adapter.connected:
            return _unavailable()
        try:
            with anyio.fail_after(self.cfg.ack_timeout):
                ack = await self.adapter.send_inbound(fields)
        except TimeoutError:
            return _unavailable()
        except MessageRejected as exc:
            return Response.json(_STATUS_OF.get(exc.code, 400), exc.as_dict())
        return Response.json(202, ack.as_dict())


def _fields(body: bytes) -> dict[str, Any] | Response:
    """The inbound fields of a request body, or the 400 to answer."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _error(400, "bad_json", f"the body is not valid JSON: {exc.msg}")
    if not isinstance(data, dict):
        return _error(400, "bad_json", "the body must be a JSON object")
    fields = {k: data[k] for k in FIELDS if data.get(k) is not None}
    fields.setdefault("peer_kind", "dm")
    return fields


def _error(status: int, code: str, message: str) -> Response:
    return Response.json(status, {"code": code, "message": message})


def _unavailable() -> Response:
    return Response.json(
        503,
        {"code": "unavailable", "message": "the broker is unreachable; retry later"},
        ("retry-after", "1"),
    )


class Outbox:
    """The reply side: delivers to the reply URL, confirmed once it took them."""

    def __init__(self, adapter: Adapter, cfg: WebhookConfig, http: httpx.AsyncClient) -> None:
        self.adapter = adapter
        self.cfg = cfg
        self.http = http
        self.headers = dict(_JSON)
        if cfg.secret is not None:
            self.headers["x-webhook-secret"] = cfg.secret

    async def run(self) -> None:
        async for reply in self.adapter.replies():
            if isinstance(reply, Delta):
                if self.cfg.delta_url is not None:
                    body = {"type": "delta", "out_id": reply.out_id, "session": reply.session}
                    await self._post(self.cfg.delta_url, orjson.dumps({**body, "text": reply.text}))
                continue
            await self.deliver(reply)
            await self.adapter.confirm(reply.out_id)

    async def deliver(self, reply: Deliver) -> None:
        """POST until the receiver answers 2xx (unbounded: the broker keeps it meanwhile)."""
        body = orjson.dumps(reply.frame)
        attempt = 0
        while not await self._post(self.cfg.reply_url, body):
            await anyio.sleep(self.cfg.retry.delay(attempt, random.random()))
            attempt += 1
        log.info("reply %s delivered after %d retries", reply.out_id, attempt)

    async def _post(self, url: str, body: bytes) -> bool:
        try:
            with anyio.fail_after(self.cfg.post_timeout):
                response = await self.http.post(url, content=body, headers=self.headers)
        except (httpx.HTTPError, TimeoutError) as exc:
            log.warning("POST %s failed: %r", url, exc)
            return False
        if not response.is_success:
            log.warning("POST %s answered %d", url, response.status_code)
        return response.is_success


async def run_webhook(
    cfg: WebhookConfig,
    stop: anyio.Event | None = None,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until `stop` is set (or, without one, until SIGTERM/SIGINT).

    `task_status` reports the bound port once the listener accepts.
    """
    listener = await anyio.create_tcp_listener(local_host=cfg.host, local_port=cfg.port)
    port = int(listener.extra(SocketAttribute.local_port))
    async with (
        listener,  # closed here too if the adapter cannot start
        Adapter.connect(
            cfg.socket,
            cfg.channel,
            cfg.token,
            require_first=False,
            replies_buffer=cfg.replies_buffer,
        ) as adapter,
        httpx.AsyncClient(timeout=None) as http,  # timeouts: fail_after in Outbox
        anyio.create_task_group() as tg,
    ):
        if stop is None:
            stop = anyio.Event()
            await tg.start(_watch_signals, stop, tg.cancel_scope)
        tg.start_soon(Outbox(adapter, cfg, http).run)
        server = HttpServer(Inbox(adapter, cfg), Limits(max_body=cfg.max_body))
        async with anyio.create_task_group() as serving:
            await serving.start(server.serve, listener)
            log.info("listening on http://%s:%d for channel %s", cfg.host, port, cfg.channel)
            task_status.started(port)
            await stop.wait()
            server.shutdown(cfg.grace)  # serving ends when its requests do
        tg.cancel_scope.cancel()  # the reply in progress, if any, is sent again later
    log.info("stopped")


async def _watch_signals(
    first: anyio.Event,
    force: anyio.CancelScope,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The first SIGTERM/SIGINT sets `first`; a second one cancels `force`."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            if first.is_set():
                log.warning("signal %d again: stopping now", signum)
                force.cancel()
                return
            log.info("signal %d: shutting down", signum)
            first.set()


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_args(argv: Sequence[str] | None = None) -> WebhookConfig:
    p = argparse.ArgumentParser(
        prog="python -m adapters.webhook", description=__doc__.split("\n")[0]
    )
    p.add_argument("--socket", type=Path, required=True, help="the broker's socket")
    p.add_argument("--channel", required=True, help="the channel this adapter serves")
    p.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 8080), help="HOST:PORT")
    p.add_argument("--reply-url", required=True, help="where replies are POSTed")
    p.add_argument("--delta-url", help="where deltas are POSTed (best effort)")
    p.add_argument(
        "--token",
        default=os.environ.get("BROKER_CHANNEL_TOKEN"),
        help="the channel's token, if the broker wants one (env BROKER_CHANNEL_TOKEN)",
    )
    p.add_argument(
        "--secret",
        default=os.environ.get("WEBHOOK_SECRET"),
        help="require this X-Webhook-Secret and send it with replies (env WEBHOOK_SECRET)",
    )
    p.add_argument("--max-body", type=int, default=1 << 20, help="largest body accepted, bytes")
    p.add_argument("--ack-timeout", type=float, default=10.0, help="seconds to wait for an ack")
    p.add_argument("--grace", type=float, default=5.0, help="seconds to finish at shutdown")
    a = p.parse_args(argv)
    host, port = a.listen
    return WebhookConfig(
        socket=a.socket,
        channel=a.channel,
        reply_url=a.reply_url,
        host=host,
        port=port,
        token=a.token,
        secret=a.secret,
        delta_url=a.delta_url,
        max_body=a.max_body,
        ack_timeout=a.ack_timeout,
        grace=a.grace,
    )


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        anyio.run(partial(run_webhook, cfg))
    except AdapterError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", cfg.host, cfg.port, exc.strerror or exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
