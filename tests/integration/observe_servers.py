"""The real servers the observability tests run: Prometheus, an OTLP/HTTP receiver.

Each is started by the test itself on a free loopback port and stopped after
it; a missing program fails the test naming the Debian package that has it
(`scripts/setup dev` installs them).
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import socket
import ssl
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest

T = TypeVar("T")


async def eventually(check: Callable[[], T], every: float = 0.2) -> T:
    """`check()` once it is truthy, asked every `every` seconds for up to 30 s."""
    with anyio.fail_after(30):
        while True:
            found = check()
            if found:
                return found
            await anyio.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def program(name: str, package: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin")
    if found is None:
        pytest.fail(f"{name} is missing: install Debian's {package} (scripts/setup dev does)")
    return found


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def targets(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/targets", timeout=5)
        r.raise_for_status()
        return list(r.json()["data"]["activeTargets"])


@contextlib.contextmanager
def prometheus(tmp: Path, target: str, interval_s: float = 0.5) -> Iterator[Prometheus]:
    """Debian's prometheus scraping `target` ("host:port") every `interval_s`."""
    exe = program("prometheus", "prometheus")
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "prometheus.yml"
    ms = int(interval_s * 1000)
    config.write_text(
        "global:\n"
        f"  scrape_interval: {ms}ms\n"
        f"  scrape_timeout: {ms}ms\n"
        "scrape_configs:\n"
        "  - job_name: brokerd\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=out,
            stderr=out,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}:\n{log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus did not become ready:\n{log.read_text()}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP trace receiver: decodes each export with opentelemetry-proto,
    inflating a gzip or deflate body. It answers the statuses in `answers` first, in
    order, then 200."""

    url: str
    path: str = "/v1/traces"
    answers: list[int] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)  # ExportTraceServiceRequest
    arrived: list[float] = field(default_factory=list)  # time.monotonic() of each
    headers: list[dict[str, str]] = field(default_factory=list)  # of each, names lowercase
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arrival_of(self, name: str) -> float:
        """When the first export holding a span named `name` came."""
        with self.lock:
            for req, at in zip(self.requests, self.arrived, strict=True):
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        if any(span.name == name for span in ss.spans):
                            return at
        raise LookupError(name)

    def spans(self) -> list[tuple[Any, Any]]:
        """(resource spans' resource, span) of every span received so far."""
        out: list[tuple[Any, Any]] = []
        with self.lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        out.extend((rs.resource, span) for span in ss.spans)
        return out


@contextlib.contextmanager
def otlp_receiver(
    path: str = "/v1/traces", tls: ssl.SSLContext | None = None, answers: Sequence[int] = ()
) -> Iterator[OtlpReceiver]:
    """A receiver on a free loopback port taking exports at `path`, over TLS with `tls`."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    port = free_port()
    scheme = "https" if tls else "http"
    receiver = OtlpReceiver(f"{scheme}://127.0.0.1:{port}", path, list(answers))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.lock:
                status = receiver.answers.pop(0) if receiver.answers else 200
                if status != 200:
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
            if status == 200 and (
                self.path != receiver.path
                or self.headers.get("content-type") != "application/x-protobuf"
            ):
                status = 404
            if status != 200:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            encoding = self.headers.get("content-encoding")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with receiver.lock:
                receiver.requests.append(request)
                receiver.arrived.append(time.monotonic())
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
