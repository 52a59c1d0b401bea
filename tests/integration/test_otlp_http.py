"""The trace exporter's post honours the OpenTelemetry exporter's variables: endpoint
path, headers, certificate, client certificate, compression and timeout, the traces'
own variable before the shared one; it retries what may pass later and nothing else;
and a variable it would not take stops brokerd at start (78, naming it).

Each test posts a real request to a real local receiver (over TLS with certificates
made by openssl for the test), which decodes it with opentelemetry-proto.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from broker.observe import otlp_wire as wire
from broker.observe.otlp_http import OtlpHttp
from tests.integration.observe_servers import free_port, otlp_receiver
from tests.integration.test_missing_extras import brokerd_without, config_file

REQUEST = wire.Request({"service.name": "t"}, "broker").encode(
    [wire.span(b"t" * 16, b"s" * 8, b"", 0x100, wire.name("probe"), wire.SERVER, 1, 2, ())]
)


def names(receiver_spans: list[tuple[object, object]]) -> list[str]:
    return [span.name for _, span in receiver_spans]  # type: ignore[attr-defined]


def test_the_endpoint_gets_v1_traces_under_its_own_path() -> None:
    with otlp_receiver(path="/otlp/v1/traces") as receiver:
        assert OtlpHttp.to(receiver.url + "/otlp/", env={}).send(REQUEST) is None
        assert names(receiver.spans()) == ["probe"]


def test_headers_come_from_the_traces_variable_else_the_shared_one() -> None:
    shared = {"OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=two%20words"}
    own = {**shared, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=3"}
    with otlp_receiver() as receiver:
        assert OtlpHttp.to(receiver.url, env=shared).send(REQUEST) is None
        assert OtlpHttp.to(receiver.url, env=own).send(REQUEST) is None
        first, second = receiver.headers
    assert (first.get("a"), first.get("b")) == ("1", "two words")
    assert (second.get("a"), second.get("b")) == (None, "3")


@pytest.mark.parametrize("compression", ["gzip", "deflate", "none"])
def test_the_body_is_compressed_as_the_variable_says(compression: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": compression.upper()}
    with otlp_receiver() as receiver:
        assert OtlpHttp.to(receiver.url, env=env).send(REQUEST) is None
        assert names(receiver.spans()) == ["probe"]
        sent = receiver.headers[0]
    assert sent.get("content-encoding") == (None if compression == "none" else compression)
    assert sent["content-type"] == "application/x-protobuf"


def certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


def test_the_collector_s_certificate_and_the_client_s_are_those_the_variables_name(
    tmp_path: Path,
) -> None:
    server_cert, server_key = certificate(tmp_path, "collector")
    client_cert, client_key = certificate(tmp_path, "client")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(server_cert, server_key)
    tls.verify_mode = ssl.CERT_REQUIRED
    tls.load_verify_locations(client_cert)
    trusted = {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(server_cert)}
    as_client = {
        **trusted,
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": str(client_cert),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(client_key),
    }
    with otlp_receiver(tls=tls) as receiver:
        unknown = OtlpHttp.to(receiver.url, env={}).send(REQUEST)
        anonymous = OtlpHttp.to(receiver.url, env=trusted).send(REQUEST)
        assert OtlpHttp.to(receiver.url, env=as_client).send(REQUEST) is None
        assert names(receiver.spans()) == ["probe"]
    assert unknown is not None and "CERTIFICATE_VERIFY_FAILED" in unknown
    assert anonymous is not None  # the collector wants a client certificate


def test_a_collector_that_does_not_answer_is_given_up_after_the_variable_s_timeout() -> None:
    with socket.socket() as silent:  # connects (the backlog takes it), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        sender = OtlpHttp.to(url, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "0.3"})
        began = time.monotonic()
        failed = sender.send(REQUEST)
        took = time.monotonic() - began
    assert failed is not None and "timed out" in failed.lower()
    assert 0.25 <= took < 2.0  # the default would wait 3 s
    assert OtlpHttp.to(url, env={}).timeout_s == 3.0
    assert OtlpHttp.to(url, env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "7"}).timeout_s == 7.0


def test_busy_answers_are_retried_and_refusals_are_not() -> None:
    with otlp_receiver(answers=[503, 429]) as receiver:
        assert OtlpHttp.to(receiver.url, env={}).send(REQUEST) is None
        assert len(receiver.headers) == 3 and names(receiver.spans()) == ["probe"]
    with otlp_receiver(answers=[400]) as receiver:
        assert OtlpHttp.to(receiver.url, env={}).send(REQUEST) == "HTTP 400"
        assert len(receiver.headers) == 1 and not receiver.spans()
    refused = f"http://127.0.0.1:{free_port()}"  # nothing listens
    assert OtlpHttp.to(refused, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}).send(REQUEST)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "brotli"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "nan"),
    ],
)
def test_a_variable_the_exporter_would_not_take_is_refused_naming_it(
    variable: str, value: str
) -> None:
    with pytest.raises(ValueError, match=variable):
        OtlpHttp.to("http://127.0.0.1:9", env={variable: value})


def test_brokerd_stops_at_start_on_such_a_variable(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")
    config = config_file(short_tmp, {"tracing": {"otlp_endpoint": "http://127.0.0.1:9"}})
    done = brokerd_without([], config, "--check-config")
    assert done.returncode == 78, done.stderr
    assert "OTEL_EXPORTER_OTLP_COMPRESSION" in done.stderr and "Traceback" not in done.stderr
