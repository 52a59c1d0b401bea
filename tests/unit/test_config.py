"""Settings: defaults, TOML file, BROKER_* overrides, errors naming the key, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import EX_CONFIG, ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No BROKER_* variable from the outside world leaks into a test."""
    for name in list(os.environ):
        if name.upper().startswith("BROKER_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str, name: str = "broker.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


def test_defaults() -> None:
    s = load_settings()
    assert s.server_name == "brokerd"
    assert s.socket_path == Path("var/broker.sock")
    assert s.socket_mode == 0o660
    assert s.max_frame_bytes == 1 << 20
    assert s.max_text_bytes == 256 << 10
    assert s.max_pending_bytes == 64 << 20
    assert s.frame_timeout_s == 30.0
    assert s.ledger.path == Path("var/ledger.db")
    assert s.ledger.synchronous == "NORMAL"
    assert s.ledger.readers == 2
    assert s.engine.kind == "echo"
    assert s.auth.allowed_uids is None
    assert s.auth.require_token is False
    assert s.queue.person_mode == "interrupt"
    assert s.queue.worker_mode == "followup"
    assert s.owners == []
    assert s.routes == []


def test_toml_file_is_loaded(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
server_name = "test-broker"
socket_mode = 0o600
max_text_bytes = 4096

[ledger]
path = "/srv/ledger.db"
synchronous = "FULL"

[auth]
channel_tokens = { chat = "secret" }

[[owners]]
channel = "chat"
sender_id = "boss"

[[routes]]
name = "owner"
match = { principal = ["owner"] }
session = { persona = "butler" }
queue = { mode = "steer", allowed = ["steer", "queue"] }
""",
    )
    s = load_settings(path)
    assert s.server_name == "test-broker"
    assert s.socket_mode == 0o600
    assert s.max_text_bytes == 4096
    assert s.ledger.path == Path("/srv/ledger.db")
    assert s.ledger.synchronous == "FULL"
    assert s.ledger.readers == 2  # untouched keys keep their defaults
    assert s.auth.channel_tokens == {"chat": "secret"}
    assert [(o.channel, o.sender_id) for o in s.owners] == [("chat", "boss")]
    assert s.routes[0].name == "owner"
    assert s.routes[0].session.persona == "butler"
    assert s.routes[0].queue.allowed == ["steer", "queue"]


def test_broker_config_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, 'server_name = "from-env-file"\n')
    monkeypatch.setenv("BROKER_CONFIG", str(path))
    assert load_settings().server_name == "from-env-file"
    other = write(tmp_path, 'server_name = "explicit"\n', "other.toml")
    assert load_settings(other).server_name == "explicit"  # an explicit path wins


def test_env_overrides_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        tmp_path,
        'server_name = "file"\n[ledger]\npath = "file.db"\nsynchronous = "NORMAL"\n',
    )
    monkeypatch.setenv("BROKER_LEDGER__SYNCHRONOUS", "FULL")
    monkeypatch.setenv("BROKER_SERVER_NAME", "env")
    monkeypatch.setenv("BROKER_QUEUE__DEBOUNCE_MS", "250")
    s = load_settings(path)
    assert s.ledger.synchronous == "FULL"
    assert s.ledger.path == Path("file.db")  # the rest of the section still comes from the file
    assert s.server_name == "env"
    assert s.queue.debounce_ms == 250


def test_env_override_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_LEDGER__READERS", "4")
    monkeypatch.setenv("BROKER_AUTH__REQUIRE_TOKEN", "true")
    s = load_settings()
    assert s.ledger.readers == 4
    assert s.auth.require_token is True


def test_keyword_overrides_are_applied(tmp_path: Path) -> None:
    path = write(tmp_path, 'server_name = "file"\n')
    assert load_settings(path, server_name="kw").server_name == "kw"


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[ledger]\nsynchronous = "OFF"\n', "ledger.synchronous"),
        ("[ledger]\nreaders = 0\n", "ledger.readers"),
        ('[ledger]\njournal = "wal"\n', "ledger.journal"),
        ("max_frame_bytes = 10\n", "max_frame_bytes"),
        ("max_pending_bytes = 10\n", "max_pending_bytes"),
        ("frame_timeout_s = 0\n", "frame_timeout_s"),
        ("socket_mode = 0o1777\n", "socket_mode"),
        ("unknown_top = 1\n", "unknown_top"),
        ('log_level = "loud"\n', "log_level"),
        ('[auth]\nchannel_tokens = { "Bad Name" = "t" }\n', "auth.channel_tokens"),
        ('[engine]\nkind = "gpt"\n', "engine.kind"),
        ('[[routes]]\nname = "r"\nsession = { key = "{nope}" }\n', "routes.0.session.key"),
        ('[[owners]]\nchannel = "chat"\n', "owners.0.sender_id"),
        ('[[routes]]\nname = "r"\nkeep_days = -1\n', "routes.0.keep_days"),
        ('[[routes]]\nname = "r"\nkeep_days = inf\n', "routes.0.keep_days"),
    ],
)
def test_invalid_file_value_names_the_dotted_key(tmp_path: Path, toml: str, key: str) -> None:
    path = write(tmp_path, toml)
    message = config_error(path)
    assert f"  {key}: " in message or f"  {key} (rule " in message
    assert str(path) in message


def test_error_inside_a_route_rule_names_the_rule(tmp_path: Path) -> None:
    path = write(tmp_path, '[[routes]]\nname = "groups"\nsession = { key = "{nope}" }\n')
    assert "routes.0.session.key (rule 'groups'): " in config_error(path)


def test_every_bad_key_is_listed(tmp_path: Path) -> None:
    path = write(tmp_path, 'log_level = "loud"\n[queue]\ncap = 0\n')
    message = config_error(path)
    assert "log_level: " in message
    assert "queue.cap: " in message


@pytest.mark.parametrize(
    ("var", "value", "key"),
    [
        ("BROKER_LEDGER__SYNCHRONOUS", "OFF", "ledger.synchronous"),
        ("BROKER_MAX_INFLIGHT", "lots", "max_inflight"),
        ("BROKER_QUEUE__DEBOUNCE_MS", "-1", "queue.debounce_ms"),
        ("BROKER_LEDGER__BOGUS", "1", "ledger.bogus"),
    ],
)
def test_invalid_env_value_names_the_dotted_key(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, key: str
) -> None:
    monkeypatch.setenv(var, value)
    assert f"  {key}: " in config_error()


def test_max_pending_bytes_must_hold_the_largest_frame(tmp_path: Path) -> None:
    path = write(tmp_path, "max_frame_bytes = 2048\nmax_pending_bytes = 2047\n")
    message = config_error(path)
    assert "max_pending_bytes (2047) is less than max_frame_bytes (2048)" in message
    assert load_settings(write(tmp_path, "max_frame_bytes = 2048\nmax_pending_bytes = 2048\n"))


def test_invalid_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "server_name = \n[ledger\n")
    message = config_error(path)
    assert "not valid TOML" in message
    assert str(path) in message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    message = config_error(path)
    assert "cannot read config file" in message
    assert str(path) in message


def test_settings_model_forbids_unknown_keys_directly() -> None:
    with pytest.raises(ValueError, match="bogus"):
        Settings(bogus=1)  # type: ignore[call-arg]


# -- the daemon's command line ------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BROKER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_cli_bad_config_exits_78_naming_the_key(tmp_path: Path) -> None:
    bad = write(tmp_path, '[ledger]\nsynchronous = "SOMETIMES"\n', "bad.toml")
    proc = run_cli("--config", str(bad), cwd=tmp_path)
    assert proc.returncode == EX_CONFIG == 78
    assert "ledger.synchronous" in proc.stderr
    assert str(bad) in proc.stderr
    assert not (tmp_path / "var").exists()  # nothing was started


def test_cli_check_config_with_a_good_file_exits_0(tmp_path: Path) -> None:
    good = write(tmp_path, '[ledger]\nsynchronous = "FULL"\n', "good.toml")
    proc = run_cli("--check-config", "--config", str(good), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout
    assert not (tmp_path / "var").exists()


def test_a_route_rule_keeps_its_own_days_fractions_allowed(tmp_path: Path) -> None:
    path = write(tmp_path, '[[routes]]\nname = "groups"\nkeep_days = 0.5\n')
    assert load_settings(path).routes[0].keep_days == 0.5
