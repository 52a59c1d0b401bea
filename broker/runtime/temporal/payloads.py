"""How the node's client turns what a session's workflow and its activities hand each
other into Temporal payloads (session_records.py), and back.

The same "json/plain" payloads as the SDK's default converter, made with orjson
rather than the standard library's encoder (docs/performance.md); a value orjson does
not know (a named tuple, an object with a `dict()`) goes to the default encoder, so
anything the SDK encodes is still encoded. The payloads are JSON either way: the
default converter reads ours and ours reads its, and nothing in a workflow's history
depends on the bytes, as a replay compares commands, not payloads. Decoding keeps the
SDK's type-driven rebuild (`value_to_type`: unknown keys ignored, a missing field left
to its default, each field converted by its type), but resolves a dataclass's field
types once per class rather than at every payload.
"""

from __future__ import annotations

import dataclasses
import typing
import weakref
from typing import Any

import orjson
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
)
from temporalio.converter import value_to_type as _value_to_type

ENCODING = b"json/plain"


# by class, for the process (the SDK makes a converter for every workflow run);
# weakly, as a sandboxed run imports its own copies of the classes it does not pass through.
_FIELDS: weakref.WeakKeyDictionary[type, dict[str, Any] | None] = weakref.WeakKeyDictionary()


class DataclassFields(JSONTypeConverter):
    """A dataclass rebuilt with its field types resolved once."""

    def to_typed_value(self, hint: type, value: Any) -> Any:
        fields = _FIELDS.get(hint, ...) if isinstance(hint, type) else None
        if fields is ...:
            fields = _FIELDS[hint] = _init_fields(hint)
        if fields is None or not isinstance(value, dict):
            return JSONTypeConverter.Unhandled  # the SDK's way, and its errors
        converters = [self]
        return hint(
            **{
                name: _value_to_type(field_type, value[name], converters)
                for name, field_type in fields.items()
                if name in value
            }
        )


def _init_fields(hint: type) -> dict[str, Any] | None:
    """The field types of a dataclass whose fields are all given to its `__init__`;
    None for anything else (left to the SDK)."""
    if not dataclasses.is_dataclass(hint):
        return None
    fields = dataclasses.fields(hint)
    if not all(f.init for f in fields):
        return None
    hints = typing.get_type_hints(hint)
    return {f.name: hints[f.name] for f in fields}


class OrjsonPlainPayloadConverter(JSONPlainPayloadConverter):
    """The "json/plain" payloads by orjson, the SDK's encoder for what orjson
    refuses; decoded with the dataclasses' field types cached."""

    def __init__(self) -> None:
        self._dataclasses = DataclassFields()
        super().__init__(custom_type_converters=[self._dataclasses])

    def to_payload(self, value: Any) -> Payload | None:
        try:
            data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return super().to_payload(value)
        return Payload(metadata={"encoding": ENCODING}, data=data)

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        try:
            value = orjson.loads(payload.data)
        except orjson.JSONDecodeError:  # JSON orjson does not read (NaN): the SDK's parse
            return super().from_payload(payload, type_hint)
        if type_hint is None:
            return value
        return _value_to_type(type_hint, value, [self._dataclasses])


class PayloadConverter(CompositePayloadConverter):
    """The SDK's default converters, its JSON one replaced."""

    def __init__(self) -> None:
        super().__init__(
            *(
                OrjsonPlainPayloadConverter()
                if isinstance(converter, JSONPlainPayloadConverter)
                else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


def data_converter() -> DataConverter:
    return dataclasses.replace(DataConverter.default, payload_converter_class=PayloadConverter)
