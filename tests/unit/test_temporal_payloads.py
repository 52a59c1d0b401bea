"""The node's Temporal payloads (broker/runtime/temporal/payloads.py): orjson's JSON
that the SDK's default converter reads, and the other way round, for every record a
session's workflow and its activities hand each other; and the workflow runner the
node's `[runtime] workflow_sandbox` picks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import pytest

pytest.importorskip("temporalio")

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from broker.config import RuntimeSettings
from broker.runtime.temporal.control import Control, ControlPush
from broker.runtime.temporal.payloads import data_converter
from broker.runtime.temporal.runtime import workflow_runner
from broker.runtime.temporal.session_records import (
    Arrival,
    Drops,
    FailedTurn,
    QueueSetup,
    SessionSpec,
    TurnOrder,
    TurnResult,
)
from broker.runtime.temporal.timer_workflow import Fired, TimerRun
from ledger.port.records import ItemInfo

ITEM = ItemInfo(
    "i1", 7, "s", "person", None, "queued", None, None, "sms", "m1", "u1", "Ünïcode ✓",
    "dm", "u1", None, "the quick brown fox", None, "followup",
)  # fmt: skip
RECORD = list(ITEM)
RECORDS: list[Any] = [
    SessionSpec("s", 30.0, True, 90.0, 5.0, [Arrival(RECORD, "followup")], 60),
    Arrival(RECORD, None, command=True),
    TurnOrder("s", 3, [RECORD], [RECORD]),
    FailedTurn(TurnOrder("s", 4, [RECORD]), "RuntimeError"),
    TurnResult("aborted", ["i1"], ["i2"]),
    QueueSetup(0.25, None, "old", "collect"),
    QueueSetup(0.0, 5, "summarize"),
    Drops("s", [("i1", "cap:old"), ("i2", "failed")]),
    Control("interrupt", [RECORD], [RECORD], 2),
    ControlPush("s", 3, Control(None, [])),
    TimerRun("t1", 1_764_000_000_000, 10.0),
    Fired(2, None),
    None,
    "s",
    3,
    True,
]


async def convert(value: Any, writer: DataConverter, reader: DataConverter) -> Any:
    payloads = await writer.encode([value])
    [back] = await reader.decode(payloads, [type(value)])
    return back


@pytest.mark.parametrize("value", RECORDS, ids=lambda v: type(v).__name__)
@pytest.mark.anyio
async def test_every_record_reads_back_equal_whichever_converter_wrote_it(value: Any) -> None:
    ours, sdk = data_converter(), DataConverter.default
    for writer, reader in ((ours, ours), (ours, sdk), (sdk, ours)):
        back = await convert(value, writer, reader)
        assert back == value and type(back) is type(value)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_payload_is_the_same_json_the_sdk_writes() -> None:
    spec = RECORDS[0]
    [ours] = data_converter().payload_converter.to_payloads([spec])
    [sdk] = DataConverter.default.payload_converter.to_payloads([spec])
    assert ours.metadata == sdk.metadata == {"encoding": b"json/plain"}
    assert orjson.loads(ours.data) == orjson.loads(sdk.data)


class Pair(NamedTuple):
    left: str
    right: int


def test_a_value_orjson_refuses_is_written_by_the_sdks_encoder() -> None:
    """A named tuple: orjson refuses it, the SDK writes it as a list."""
    [payload] = data_converter().payload_converter.to_payloads([Pair("a", 1)])
    assert orjson.loads(payload.data) == ["a", 1]


def test_json_orjson_cannot_parse_is_read_by_the_sdks_parser() -> None:
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b"NaN")
    [value] = data_converter().payload_converter.from_payloads([payload], [float])
    assert value != value  # NaN


def test_a_record_of_an_older_node_gets_its_missing_fields_defaults() -> None:
    """A spec written before `history_max_events` and `carried` existed, with a key no
    longer known: read as the SDK reads it (unknown keys ignored, defaults kept)."""
    old = {"label": "s", "idle_s": 30, "steerable": False, "turn_timeout_s": 90,
           "heartbeat_timeout_s": 5, "gone": 1}  # fmt: skip
    payload = Payload(metadata={"encoding": b"json/plain"}, data=orjson.dumps(old))
    [spec] = data_converter().payload_converter.from_payloads([payload], [SessionSpec])
    assert spec == SessionSpec("s", 30, False, 90, 5, [], 0)


@dataclass
class WithDerived:
    value: int
    derived: int = field(init=False, default=0)


def test_a_dataclass_with_a_field_outside_init_is_left_to_the_sdk() -> None:
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"value":2,"derived":4}')
    [back] = data_converter().payload_converter.from_payloads([payload], [WithDerived])
    assert (back.value, back.derived) == (2, 4)


def test_a_field_of_the_wrong_type_is_refused_as_the_sdk_refuses_it() -> None:
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"label":"s","drops":5}')
    with pytest.raises(TypeError):
        data_converter().payload_converter.from_payloads([payload], [Drops])


def test_the_node_runs_its_workflows_out_of_the_sandbox_unless_told_to() -> None:
    assert RuntimeSettings().workflow_sandbox is False
    assert isinstance(workflow_runner(RuntimeSettings()), UnsandboxedWorkflowRunner)
    sandboxed = workflow_runner(RuntimeSettings(workflow_sandbox=True))
    assert isinstance(sandboxed, SandboxedWorkflowRunner)
