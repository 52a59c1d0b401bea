"""A fake OpenAI-compatible chat-completions server on loopback, to try the
`openai` engine offline and to test it.

    python -m broker.engines.fake_openai --port 8080

serves `POST /v1/chat/completions` at `http://127.0.0.1:8080/v1`, streamed
(server-sent events) as the real API streams, answering each request with
"You said: " and the latest user message, and the usage of the request in
words. It takes any key, or none, and keeps nothing.

`FakeOpenAI` is the same server in a background thread for tests: a test
queues the replies it wants, one per request, in order (a streamed text reply,
streamed tool calls, or an HTTP error with an OpenAI-style error body), and
every request body is recorded in `requests`. Without `echo`, a request with no
reply queued is answered with an error; with it, as the command line answers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Json = dict[str, Any]


@dataclass
class Reply:
    status: int = 200
    chunks: list[Json] = field(default_factory=list)  # SSE data, for status 200
    error: Json | None = None  # the JSON body for an error status
    stall: bool = False  # after the chunks, hold the stream open until the server stops


def _chunk(model: str, delta: Json | None, finish: str | None = None) -> Json:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": choices,
    }


def _usage_chunk(model: str, prompt: int, completion: int) -> Json:
    chunk = _chunk(model, None)
    chunk["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return chunk


def text_reply(
    pieces: list[str], *, model: str = "fake-model", usage: tuple[int, int] = (10, 5)
) -> Reply:
    chunks = [_chunk(model, {"role": "assistant", "content": ""})]
    chunks += [_chunk(model, {"content": piece}) for piece in pieces]
    chunks.append(_chunk(model, {}, "stop"))
    chunks.append(_usage_chunk(model, *usage))
    return Reply(chunks=chunks)


def tool_call_reply(
    calls: list[tuple[str, str, str]],
    *,
    model: str = "fake-model",
    usage: tuple[int, int] = (20, 7),
) -> Reply:
    """Calls as (id, name, arguments JSON); the arguments arrive in two pieces."""
    chunks = [_chunk(model, {"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        half = len(arguments) // 2
        first = {"index": index, "id": call_id, "type": "function"}
        first["function"] = {"name": name, "arguments": arguments[:half]}
        rest = {"index": index, "function": {"arguments": arguments[half:]}}
        chunks.append(_chunk(model, {"tool_calls": [first]}))
        chunks.append(_chunk(model, {"tool_calls": [rest]}))
    chunks.append(_chunk(model, {}, "tool_calls"))
    chunks.append(_usage_chunk(model, *usage))
    return Reply(chunks=chunks)


def echo_reply(body: Json) -> Reply:
    """What the command-line server answers: the latest user message, said back."""
    said = ""
    for message in body.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            said = content if isinstance(content, str) else json.dumps(content)
    words = f"You said: {said}".split(" ")
    pieces = [word if i == 0 else " " + word for i, word in enumerate(words)]
    prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or ())
    model = str(body.get("model") or "fake-model")
    return text_reply(pieces, model=model, usage=(prompt, len(words)))


def stream_error_reply(pieces: list[str], message: str) -> Reply:
    """A 200 stream that breaks off with an error event, as some servers do."""
    reply = text_reply(pieces)
    reply.chunks = reply.chunks[: 1 + len(pieces)]
    reply.chunks.append({"error": {"message": message, "type": "server_error", "code": None}})
    return reply


def error_reply(status: int, message: str, code: str | None = None) -> Reply:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return Reply(status=status, error={"error": error})


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        reply = self.server.fake.take(self.path, body)
        if reply.status != 200:
            self._send_json(reply.status, reply.error or {})
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._stream(reply)  # the client may go away: an aborted turn

    def _stream(self, reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in reply.chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if reply.stall:
            self.server.fake.stopping.wait(10)
        self.wfile.write(b"data: [DONE]\n\n")

    def _send_json(self, status: int, body: Json) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-should-retry", "false")
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI


class FakeOpenAI:
    """`with FakeOpenAI() as api:` … `api.base_url`, `api.script(...)`, `api.requests`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, echo: bool = False) -> None:
        self.echo = echo
        self.replies: deque[Reply] = deque()
        self.requests: list[Json] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.server = _Server((host, port), _Handler)
        self.server.fake = self
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def take(self, path: str, body: Json) -> Reply:
        with self.lock:
            self.paths.append(path)
            self.requests.append(body)
            if path != "/v1/chat/completions":
                return error_reply(404, f"no route {path}")
            if not self.replies:
                if self.echo:
                    return echo_reply(body)
                return error_reply(500, "the fake server has no scripted reply left")
            return self.replies.popleft()

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.engines.fake_openai",
        description="A fake OpenAI-compatible chat-completions server, for trying the openai"
        " engine offline: it says back the latest user message.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback by default")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    args = parser.parse_args(argv)
    try:
        fake = FakeOpenAI(args.host, args.port, echo=True)
    except OSError as exc:
        print(f"fake_openai: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with fake:
        print(f"serving chat completions at {fake.base_url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
