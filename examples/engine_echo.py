#!/usr/bin/env python3
"""A tiny engine program for the broker's subprocess engine (stdlib only).

It replies with the turn's inputs upper-cased, streamed word by word, and folds
in steered messages that arrive before it is done. Configure it with

    [engine]
    kind = "subprocess"
    command = ["python3", "examples/engine_echo.py", "--delay", "0.1"]

The protocol (see broker/engines/subprocess_protocol.py and docs/engines.md): one
JSON object per line. The broker writes a `turn` line, then maybe `steer` and
`tool_result` lines; the program writes `delta` lines, then one `final` (or
`error`) line, and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import sys
import threading
import time
from typing import Any


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read_stdin(lines: queue.Queue[dict[str, Any] | None]) -> None:
    """Reader thread: every broker line onto the queue, None at end of input."""
    for line in sys.stdin:
        if line.strip():
            lines.put(json.loads(line))
    lines.put(None)


def words(text: str) -> list[str]:
    """Pieces that join back to `text`: each word with the whitespace after it."""
    return re.findall(r"\s*\S+\s*", text)


def main() -> int:
    parser = argparse.ArgumentParser(description="Echo engine for the broker.")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between words")
    args = parser.parse_args()

    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=read_stdin, args=(lines,), daemon=True).start()
    turn = lines.get()
    if turn is None or turn.get("type") != "turn":
        send({"type": "error", "message": "engine_echo: expected a turn line first"})
        return 1

    pending = words("\n".join(m["content"] for m in turn["inputs"]).upper())
    sent: list[str] = []
    taken: list[str] = []
    while pending:
        piece = pending.pop(0)
        send({"type": "delta", "text": piece})
        sent.append(piece)
        time.sleep(args.delay)
        while not lines.empty():  # fold in steered messages, if any arrived
            message = lines.get()
            if message is not None and message.get("type") == "steer":
                pending.extend(words("\n" + message["content"].upper()))
                if message.get("msg_id"):
                    taken.append(message["msg_id"])
    if taken:
        send({"type": "steer_taken", "msg_ids": taken})

    text = "".join(sent)
    prompt = sum(len(m["content"].split()) for m in turn["history"] + turn["inputs"])
    usage = {"prompt_tokens": prompt, "completion_tokens": len(text.split())}
    send({"type": "final", "text": text, "usage": usage, "model": "engine-echo"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
