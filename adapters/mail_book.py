"""What the email adapter remembers of each message it passed on: how to answer it.

A `deliver` names the msg_ids it answers, not their addresses or Message-IDs;
the reply needs both (To, In-Reply-To, References, Subject). So each message's
`ReplyContext` is written here before it goes to the broker, and read when its
reply comes, also after a restart (the broker sends unconfirmed replies again).

One append-only journal (a line per message), rewritten at open with only the newest
`keep` entries: a reply comes soon after its message, and one whose context is gone
falls back to the sender's address. Like the spool (position.py), it survives a crash
of the process, not of the machine.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from pathlib import Path

import orjson

from adapters.mail_message import ReplyContext


class ReplyBook:
    def __init__(self, path: Path, keep: int = 10_000) -> None:
        self.path = path
        self.keep = keep
        self._entries: OrderedDict[str, ReplyContext] = OrderedDict()
        with contextlib.suppress(FileNotFoundError), path.open("rb") as journal:
            for line in journal:
                self._replay(line)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(_line(k, c) for k, c in self._entries.items()))
        os.replace(tmp, path)
        self._journal = path.open("ab", buffering=0)

    def _replay(self, line: bytes) -> None:
        try:
            entry = orjson.loads(line)
            self._remember(str(entry["msg_id"]), ReplyContext.from_json(entry["context"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return  # the line a crash cut short

    def _remember(self, msg_id: str, context: ReplyContext) -> None:
        self._entries[msg_id] = context
        self._entries.move_to_end(msg_id)
        while len(self._entries) > self.keep:
            self._entries.popitem(last=False)

    def put(self, msg_id: str, context: ReplyContext) -> None:
        if self._entries.get(msg_id) == context:
            return
        self._remember(msg_id, context)
        if not self._journal.closed:
            self._journal.write(_line(msg_id, context))

    def get(self, msg_id: str) -> ReplyContext | None:
        return self._entries.get(msg_id)

    def close(self) -> None:
        self._journal.close()


def _line(msg_id: str, context: ReplyContext) -> bytes:
    return orjson.dumps({"msg_id": msg_id, "context": context.to_json()}) + b"\n"
