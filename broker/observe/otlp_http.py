"""Encoded OTLP trace requests posted over HTTP, as the OpenTelemetry exporter would.

The collector is reached the way the SDK's OTLP/HTTP span exporter reaches it
when given an endpoint: the configured endpoint with `/v1/traces` appended, and
the `OTEL_EXPORTER_OTLP_TRACES_*` variables, else the `OTEL_EXPORTER_OTLP_*`
ones, for its headers, certificate (and client certificate and key),
compression (`gzip`, `deflate`, `none`) and timeout (seconds; our default is
shorter than the SDK's, since a slow collector holds the exporter's process).
One post is bounded by that timeout, retries included; a request is sent whole
or counted lost, never half sent twice.
"""

from __future__ import annotations

import gzip
import os
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import requests
from opentelemetry.util.re import parse_env_headers

TIMEOUT_S = 3.0
RETRY_STATUS = frozenset({429, 502, 503, 504})
COMPRESSIONS = ("none", "gzip", "deflate")


def _env(env: Mapping[str, str], name: str) -> tuple[str, str | None]:
    """The variable that sets `name` (the traces' own first) and its value."""
    for variable in (f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        if env.get(variable):
            return variable, env[variable]
    return f"OTEL_EXPORTER_OTLP_{name}", None


@dataclass
class OtlpHttp:
    """Where and how requests are posted; `send` posts one."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    verify: str | bool = True
    cert: str | tuple[str, str] | None = None
    compression: str = "none"
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        self.session = requests.Session()
        self.session.headers.update(self.headers)
        self.session.headers["Content-Type"] = "application/x-protobuf"
        if self.compression != "none":
            self.session.headers["Content-Encoding"] = self.compression

    @classmethod
    def to(cls, endpoint: str, env: Mapping[str, str] = os.environ) -> OtlpHttp:
        """Posts to `endpoint`'s `/v1/traces`, as the environment's variables say. A
        compression or timeout the exporter would not take raises ValueError naming its
        variable."""
        variable, compression = _env(env, "COMPRESSION")
        compression = (compression or "none").strip().lower()
        if compression not in COMPRESSIONS:
            raise ValueError(f"{variable}: {compression!r} is not one of {', '.join(COMPRESSIONS)}")
        variable, timeout = _env(env, "TIMEOUT")
        try:
            timeout_s = float(timeout or TIMEOUT_S)
        except ValueError:
            timeout_s = -1.0
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"{variable}: {timeout!r} is not a number of seconds above 0")
        certificate, key = _env(env, "CLIENT_CERTIFICATE")[1], _env(env, "CLIENT_KEY")[1]
        return cls(
            url=endpoint.rstrip("/") + "/v1/traces",
            headers=dict(parse_env_headers(_env(env, "HEADERS")[1] or "", liberal=True)),
            verify=_env(env, "CERTIFICATE")[1] or True,
            cert=(certificate, key) if certificate and key else certificate,
            compression=compression,
            timeout_s=timeout_s,
        )

    def send(self, request: bytes) -> str | None:
        """Post one encoded request, retrying what may pass later within the timeout;
        None once the collector took it, else why not."""
        if self.compression == "gzip":
            request = gzip.compress(request, compresslevel=6, mtime=0)
        elif self.compression == "deflate":
            request = zlib.compress(request)
        deadline = time.monotonic() + self.timeout_s
        backoff = 0.25
        while True:
            try:
                answer = self.session.post(
                    self.url,
                    data=request,
                    verify=self.verify,
                    cert=self.cert,
                    timeout=max(0.1, deadline - time.monotonic()),
                )
                if answer.ok:
                    return None
                retry, reason = answer.status_code in RETRY_STATUS, f"HTTP {answer.status_code}"
            except requests.RequestException as exc:
                retry = isinstance(exc, requests.ConnectionError) and not isinstance(
                    exc,
                    requests.exceptions.SSLError,  # a certificate will not pass later
                )
                reason = str(exc)
            if not retry or time.monotonic() + backoff > deadline:
                return reason
            time.sleep(backoff)
            backoff *= 2

    def close(self) -> None:
        self.session.close()
