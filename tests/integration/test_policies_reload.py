"""Policies from a rules file, rate limits, personas, and SIGHUP reload."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess, brokerd_once
from wire.client import BrokerClient

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

STRICT = """
[[rules]]
name = "strict-dm"
match = { peer_kind = ["dm"] }
queue = { mode = "followup", allowed = ["followup"] }
rate = { per_minute = 60, burst = 3 }
"""
RELAXED = """
[[rules]]
name = "relaxed"
queue = { allowed = ["followup", "collect"] }
"""


def msg(msg_id: str, sender: str = "+1", mode: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "inbound",
        "req": msg_id,
        "msg_id": msg_id,
        "sender_id": sender,
        "peer_kind": "dm",
        "text": "hi",
    }
    if mode:
        frame["queue_mode"] = mode
    return frame


async def ask(d: DaemonProcess, frame: dict[str, Any]) -> dict[str, Any]:
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        await c.send(frame)
        with anyio.fail_after(10):
            return await c.recv_until(str(frame["req"]))


async def wait_log(d: DaemonProcess, text: str) -> None:
    with anyio.fail_after(10):
        while text not in d.log():  # noqa: ASYNC110 - another process's log file
            await anyio.sleep(0.05)


def policies(d: DaemonProcess, text: str) -> Path:
    path = d.workdir / "policies.toml"
    path.write_text(text)
    return path


def start_with_policies(make_daemon: DaemonFactory, tmp: Path, text: str) -> DaemonProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "policies.toml").write_text(text)
    return make_daemon({"policies_file": str(tmp / "policies.toml")}, name=tmp.name)


@pytest.mark.anyio
@asyncio_only
async def test_rules_file_refuses_a_mode_and_reload_allows_it(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = start_with_policies(make_daemon, short_tmp / "p1", STRICT)
    refused = await ask(d, msg("m1", mode="collect"))
    assert refused["code"] == "invalid" and refused["field"] == "queue_mode"
    assert "strict-dm" in refused["message"]
    policies(d, RELAXED)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    await wait_log(d, '"reloaded"')
    assert (await ask(d, msg("m2", mode="collect")))["type"] == "ack"


@pytest.mark.anyio
@asyncio_only
async def test_invalid_reload_keeps_the_old_rules(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = start_with_policies(make_daemon, short_tmp / "p2", STRICT)
    policies(d, '[[rules]]\nname = "broken"\nsession = { key = "dm:{nope}" }\n')
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    await wait_log(d, "reload refused")
    assert "broken" in d.log()  # the reason names the rule
    still = await ask(d, msg("m1", mode="collect"))
    assert still["code"] == "invalid"  # the strict rule is still in force
    assert d.proc.poll() is None


@pytest.mark.anyio
@asyncio_only
async def test_rate_limit_per_sender(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    d = start_with_policies(make_daemon, short_tmp / "p3", STRICT)
    answers = [await ask(d, msg(f"r{n}")) for n in range(4)]
    assert [a["type"] for a in answers] == ["ack", "ack", "ack", "error"]
    assert answers[3]["code"] == "overloaded" and "strict-dm" in answers[3]["message"]
    assert (await ask(d, msg("other", sender="+2")))["type"] == "ack"
    with d.db() as db:
        stored = {r[0] for r in db.execute("SELECT msg_id FROM inbound")}
    assert stored == {"r0", "r1", "r2", "other"}, "a refused message stores nothing"


@pytest.mark.anyio
@asyncio_only
async def test_restart_only_keys_are_reported(make_daemon: DaemonFactory) -> None:
    d = make_daemon({"queue": {"debounce_ms": 100}})
    d.config["ledger"] = {"path": str(d.workdir / "elsewhere.db")}
    d.config["queue"] = {"debounce_ms": 200}
    from tests.harness import write_config

    write_config(d.config_path, d.config)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    await wait_log(d, "take effect after a restart")
    assert '"ledger"' in d.log().split("take effect after a restart")[-2].splitlines()[-1] or (
        "ledger" in d.log()
    )
    assert (await ask(d, msg("m1")))["type"] == "ack"  # still on the old ledger
    assert not (d.workdir / "elsewhere.db").exists()


def test_unknown_persona_stops_the_start_with_78(tmp_path: Path) -> None:
    rules = tmp_path / "policies.toml"
    rules.write_text('[[rules]]\nname = "vip"\nsession = { persona = "atlas" }\n')
    config = tmp_path / "broker.toml"
    config.write_text(f'policies_file = "{rules}"\nsocket_path = "{tmp_path}/s.sock"\n')
    done = brokerd_once(config)
    assert done.returncode == 78
    assert "'vip'" in done.stderr and "atlas" in done.stderr


def test_bad_rule_in_file_names_the_rule(tmp_path: Path) -> None:
    rules = tmp_path / "policies.toml"
    rules.write_text(
        '[[rules]]\nname = "ok"\n\n[[rules]]\nname = "groups"\nqueue = { mode = "sometimes" }\n'
    )
    config = tmp_path / "broker.toml"
    config.write_text(f'policies_file = "{rules}"\nsocket_path = "{tmp_path}/s.sock"\n')
    done = brokerd_once(config)
    assert done.returncode == 78
    assert "rules.1.queue.mode (rule 'groups')" in done.stderr
