"""`[runtime]`: the local runtime by default; Temporal only on a shared ledger, or on a
SQLite file when a single node is asked for explicitly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.config import ConfigError, Settings, load_settings


@pytest.fixture(autouse=True)
def _no_broker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("BROKER_"):
            monkeypatch.delenv(name)


def settings_from(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return load_settings(path)


def test_the_default_runtime_is_local() -> None:
    runtime = load_settings().runtime
    assert (runtime.kind, runtime.address, runtime.namespace, runtime.task_queue) == (
        "local",
        "127.0.0.1:7233",
        "default",
        "broker",
    )
    assert runtime.allow_local_ledger is False


def test_temporal_on_the_default_sqlite_ledger_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="share one ledger"):
        settings_from(tmp_path, '[runtime]\nkind = "temporal"\n')


def test_a_single_temporal_node_on_sqlite_when_asked_for(tmp_path: Path) -> None:
    loaded = settings_from(
        tmp_path, 'node_id = "a"\n[runtime]\nkind = "temporal"\nallow_local_ledger = true\n'
    )
    assert (loaded.node_id, loaded.runtime.kind) == ("a", "temporal")


def test_an_unknown_runtime_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="runtime"):
        settings_from(tmp_path, '[runtime]\nkind = "ray"\n')


def test_a_runs_history_bound_and_the_metrics_address_have_defaults(tmp_path: Path) -> None:
    runtime = load_settings().runtime
    assert (runtime.history_max_events, runtime.metrics_address) == (120, "")
    loaded = settings_from(
        tmp_path,
        '[runtime]\nhistory_max_events = 0\nmetrics_address = "127.0.0.1:9464"\n',
    )
    assert (loaded.runtime.history_max_events, loaded.runtime.metrics_address) == (
        0,
        "127.0.0.1:9464",
    )


def test_a_negative_history_bound_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="history_max_events"):
        settings_from(tmp_path, "[runtime]\nhistory_max_events = -1\n")
