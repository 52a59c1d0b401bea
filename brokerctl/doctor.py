"""`brokerctl doctor`: checks an operator can run without reading the code.

Each check returns findings: ok, warn or fail, with what to do about it. The
checks read the config, the socket and the ledger file (read-only, through
`ledger/inspect.py`), so they also work while the daemon is down; the daemon
itself is asked for `health`.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from broker.config import ConfigError, Settings, load_rules, load_settings
from ledger.db import RECOVERY
from ledger.inspect import inspect_file, waiting_items
from ledger.port.records import LedgerReport
from wire.client import BrokerClient

Level = Literal["ok", "warn", "fail"]
STUCK_FACTOR = 2  # a turn running longer than twice the engine timeout is stuck


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    check: str
    message: str
    fix: str = ""


def check_config(path: Path | None) -> tuple[Settings | None, list[Finding]]:
    try:
        settings = load_settings(path)
        rules = load_rules(settings)
    except ConfigError as exc:
        return None, [Finding("fail", "config", str(exc), "correct the key it names")]
    return settings, [Finding("ok", "config", f"valid; {len(rules)} route rule(s)")]


def check_socket(settings: Settings) -> list[Finding]:
    path = settings.socket_path
    try:
        st = path.stat()
    except FileNotFoundError:
        return [
            Finding(
                "fail",
                "socket",
                f"{path} does not exist",
                "start the daemon (systemctl start brokerd)",
            )
        ]
    if not stat.S_ISSOCK(st.st_mode):
        return [Finding("fail", "socket", f"{path} is not a socket", "remove it and restart")]
    mode = stat.S_IMODE(st.st_mode)
    out = [Finding("ok", "socket", f"{path} owned by {st.st_uid}:{st.st_gid}, mode {mode:o}")]
    if mode & 0o007:
        out.append(
            Finding(
                "warn",
                "socket",
                f"{path} is accessible to every user (mode {mode:o})",
                "set socket_mode = 0o660 (or SocketMode=0660 in the socket unit)",
            )
        )
    if st.st_uid != os.getuid() and not os.access(path, os.R_OK | os.W_OK):
        out.append(
            Finding(
                "fail",
                "socket",
                "this user may not use the socket",
                "run as the broker's user or add yourself to its group",
            )
        )
    return out


async def check_daemon(settings: Settings) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The daemon's `health` (None when it does not answer) and what it says."""
    try:
        with anyio.fail_after(5):
            async with await BrokerClient.connect(settings.socket_path) as client:
                health = await client.op("health")
    except (OSError, TimeoutError) as exc:
        return None, [
            Finding(
                "fail",
                "daemon",
                f"no answer on {settings.socket_path}: {exc}",
                "check `journalctl -u brokerd` and start it",
            )
        ]
    except Exception as exc:  # refused: credentials, version
        return None, [Finding("fail", "daemon", f"refused: {exc}", "check auth.allowed_uids/gids")]
    up = f"up {health['uptime_s']:.0f}s, {health['sessions']} sessions, {health['queued']} queued"
    # Stuck items are a check of their own (`check_stuck_items`).
    problems = [p for p in health.get("problems", []) if "stuck_items" not in p]
    if not problems:
        return health, [Finding("ok", "daemon", up)]
    return health, [
        Finding("fail", "daemon", f"{up}; {problem}", "see `journalctl -u brokerd`")
        for problem in problems
    ]


def check_stuck_items(settings: Settings, health: dict[str, Any] | None) -> list[Finding]:
    """Acked items no live actor holds (ops.py `_stuck_items`). Only the daemon knows its
    actors: while it is down this says how many items wait, and no more."""
    if health is None:
        waiting = waiting_items(settings.ledger.path, settings.ledger.key())
        if waiting is None:  # the ledger check says why
            return [Finding("warn", "stuck_items", "the ledger cannot be read: not checked")]
        if not waiting:
            return [Finding("ok", "stuck_items", "the daemon is down; no item waits")]
        return [
            Finding(
                "warn",
                "stuck_items",
                f"the daemon is down, so which of the {waiting} waiting item(s) an actor "
                "holds cannot be known",
                "start the daemon: it hands every waiting item to an actor",
            )
        ]
    stuck = health.get("stuck_items", [])
    if not stuck:
        after = settings.queue.stuck_after_s
        return [
            Finding("ok", "stuck_items", f"no waiting item without a live actor past {after:g}s")
        ]
    return [
        Finding(
            "fail",
            "stuck_items",
            f"{s['session']}: {s['items']} item(s) waiting {s['waiting_s']:.0f}s with no "
            f"actor ({s['why']})",
            f"see why in `journalctl -u brokerd | grep {s['session']}`; a restart hands the "
            "items to a fresh actor (brokerctl show " + s["session"] + ")",
        )
        for s in stuck
    ]


def check_ledger(settings: Settings) -> list[Finding]:
    path = settings.ledger.path
    if not path.exists():
        return [
            Finding(
                "warn", "ledger", f"{path} does not exist yet", "it is created at the first start"
            )
        ]
    now = int(time.time() * 1000)
    limit_ms = int(settings.engine.timeout_s * STUCK_FACTOR * 1000)
    report = inspect_file(
        path, now - limit_ms, settings.ledger.key()
    )  # every ledger problem is a finding
    if report.damage:
        # What else the file says cannot be trusted: the damage is the finding.
        shown = "; ".join(p.replace("\n", " ") for p in report.damage[:3])
        return [Finding("fail", "ledger", f"{path} is damaged: {shown}", RECOVERY)]
    if report.unreadable is not None:
        return [
            Finding(
                "fail",
                "ledger",
                f"cannot read {path}: {report.unreadable}",
                "check the file's owner and mode, and run doctor as the broker's user",
            )
        ]
    out = [Finding("ok", "ledger", f"{path} passes the integrity check")]
    version, latest = report.schema, report.latest
    if version < latest:
        out.append(
            Finding(
                "warn",
                "migrations",
                f"schema {version}, this broker has {latest}",
                "the next start migrates it; back up the ledger first",
            )
        )
    elif version > latest:
        out.append(
            Finding(
                "fail",
                "migrations",
                f"schema {version} is newer than this broker ({latest})",
                "run the broker version that wrote it",
            )
        )
    else:
        out.append(Finding("ok", "migrations", f"schema {version} is current"))
    out += _stuck(report, now, limit_ms)
    return out


def _stuck(report: LedgerReport, now: int, limit_ms: int) -> list[Finding]:
    out = [
        Finding(
            "warn",
            "stuck",
            f"{label}: a turn has run for {(now - since) / 60000:.1f} min",
            f"brokerctl show {label}; a restart records it as aborted and runs it again",
        )
        for label, since in report.running_since
    ]
    out += [
        Finding(
            "warn",
            "replies",
            f"{count} reply(ies) on channel {channel!r} unconfirmed",
            f"is an adapter for {channel!r} running and sending `delivered`?",
        )
        for channel, count in report.unconfirmed
    ]
    if not out:
        out.append(
            Finding(
                "ok",
                "stuck",
                f"no turn running past {limit_ms // 1000}s, no old unconfirmed replies",
            )
        )
    return out


async def run_checks(config: Path | None, socket: Path | None = None) -> list[Finding]:
    """Every check; `socket` (brokerctl's `-s`) wins over the config's, and the ledger
    checked is the one the daemon there says it serves, whatever the folder."""
    settings, findings = check_config(config)
    if settings is None:
        return findings
    if socket is not None:
        settings = settings.model_copy(update={"socket_path": socket})
    findings += check_socket(settings)
    health, said = await check_daemon(settings)
    findings += said
    served = health.get("ledger_path") if health is not None else None
    if isinstance(served, str):
        ledger = settings.ledger.model_copy(update={"path": Path(served)})
        settings = settings.model_copy(update={"ledger": ledger})
    findings += await anyio.to_thread.run_sync(check_ledger, settings)
    if settings.ledger.path.exists():
        findings += await anyio.to_thread.run_sync(check_stuck_items, settings, health)
    return findings
