"""plumbing/redact.py: secrets kept out of log lines and error messages."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from plumbing.redact import MARK, Redactor
from wire.framing import ProtocolError

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        JWT,
        PEM,
    ],
)
def test_builtin_shapes(secret: str) -> None:
    out = Redactor().text(f"before {secret} after")
    assert secret not in out and out == f"before {MARK} after"


def test_bearer_tokens_and_url_passwords() -> None:
    r = Redactor()
    assert r.text("Authorization: Bearer abc.def-ghi_123") == f"Authorization: Bearer {MARK}"
    assert r.text("postgresql://app:hunter2@db/ledger") == f"postgresql://{MARK}@db/ledger"


def test_configured_secrets_and_patterns() -> None:
    r = Redactor(["channel-token-xyz", "abc"], [r"pin=\d{4}"])
    assert r.text("token channel-token-xyz and pin=1234") == f"token {MARK} and {MARK}"
    assert r.text("abc stays: too short to be told from a word") == (
        "abc stays: too short to be told from a word"
    )


def test_nested_values_are_walked() -> None:
    event = {"event": "x", "headers": {"auth": "Bearer abcdefghij"}, "args": ["sk-" + "a" * 20]}
    out = Redactor().event(event)
    assert out["headers"] == {"auth": f"Bearer {MARK}"} and out["args"] == [MARK]


def test_plain_text_is_left_alone() -> None:
    text = "Alice asked about the sky-blue skirt and task-123; sk-short stays"
    assert Redactor().text(text) == text


def test_error_frames_are_redacted() -> None:
    frame = ProtocolError("invalid", "bad key sk-abcdefghijklmnopqrstu given").frame()
    assert frame["message"] == f"bad key {MARK} given"


SCRIPT = """
from plumbing import logs, redact
redact.configure(["my-channel-token"], [r"code \\d+"])
logs.configure("info")
log = logs.get("t")
log.info("token my-channel-token seen", key="sk-abcdefghijklmnopqrstuv", note="code 4711")
try:
    raise ValueError("Bearer abcdefghijklmnop")
except ValueError:
    log.exception("failed")
"""


def test_every_log_line_passes_the_redactor() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    first, second = (orjson.loads(line) for line in done.stderr.splitlines())
    assert first["event"] == f"token {MARK} seen" and first["key"] == MARK
    assert first["note"] == MARK
    assert "abcdefghijklmnop" not in second["exception"] and MARK in second["exception"]
