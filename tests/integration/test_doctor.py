"""brokerctl doctor against a healthy daemon, a stopped one with a stuck turn, a bad config."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess


def doctor(config: Path) -> tuple[int, list[dict[str, str]]]:
    done = in_process("--config", str(config), "--json", "doctor")
    return done.returncode, orjson.loads(done.stdout)


def levels(findings: list[dict[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in findings:  # the worst level of each check
        order = ["ok", "warn", "fail"]
        if order.index(f["level"]) >= order.index(out.get(f["check"], "ok")):
            out[f["check"]] = f["level"]
    return out


def test_healthy_daemon(daemon: DaemonProcess) -> None:
    code, findings = doctor(daemon.config_path)
    assert code == 0
    assert levels(findings) == {
        "config": "ok",
        "socket": "ok",
        "daemon": "ok",
        "ledger": "ok",
        "migrations": "ok",
        "stuck": "ok",
        "stuck_items": "ok",
    }


def test_stopped_daemon_with_a_stuck_turn(make_daemon: DaemonFactory) -> None:
    d = make_daemon()
    d.terminate()
    with ledger_db.connect(d.ledger) as db:  # a turn that started an hour ago and never ended
        db.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " VALUES ('dm:ent_x', 'dm', 'inbound', 0, 0)"
        )
        db.execute(
            "INSERT INTO queue_items (id, session_label, source, status, turn_id,"
            " created_at, updated_at) VALUES ('i1', 'dm:ent_x', 'person', 'running',"
            " 't1', 0, 0)"
        )
    code, findings = doctor(d.config_path)
    assert code == 1
    found = levels(findings)
    assert found["daemon"] == "fail" and found["stuck"] == "warn" and found["config"] == "ok"
    stuck = next(f for f in findings if f["check"] == "stuck")
    assert "dm:ent_x" in stuck["message"] and "brokerctl show dm:ent_x" in stuck["fix"]


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('[queue]\ndrop = "sometimes"\n')
    code, findings = doctor(config)
    assert code == 1
    assert [(f["check"], f["level"]) for f in findings] == [("config", "fail")]
    assert "queue.drop" in findings[0]["message"]


def test_backup_while_running(daemon: DaemonProcess, tmp_path: Path) -> None:
    target = tmp_path / "copy.db"
    done = in_process("--config", str(daemon.config_path), "backup", str(target))
    assert done.returncode == 0, done.stderr
    with ledger_db.connect(target) as copy:
        assert copy.execute("PRAGMA user_version").fetchone()[0] >= 2
        assert copy.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    again = in_process("--config", str(daemon.config_path), "backup", str(target))
    assert again.returncode == 1 and "exists" in again.stderr
